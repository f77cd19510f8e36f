//! Contract 0.3.0 through the public API, natively: tools that answer with content blocks or
//! structured values, `#[resource]` (fixed and templated), `#[prompt]`, completion, and the
//! state the registry value shares with its tools.

use std::sync::{Arc, Mutex};

use llm_worker_guest::{
    Completion, CompletionRef, Content, Message, Prompt, PromptArgument, RequestError,
    ResourceContents, ResourceData, ToolError, ToolOutput, ToolRegistry, block_on, complete,
    description, prompt, resource, tool, tool_registry,
};
use serde_json::json;

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Sum {
    total: i64,
}

#[derive(Clone, Default)]
struct Notes {
    saved: Arc<Mutex<Vec<String>>>,
}

#[tool_registry]
impl Notes {
    /// Saves a note.
    #[tool]
    fn save(&self, text: String) -> String {
        let mut saved = self.saved.lock().unwrap_or_else(|e| e.into_inner());
        saved.push(text);
        format!("saved {}", saved.len())
    }

    /// A tiny picture.
    #[tool]
    fn picture(&self) -> Content {
        Content::image("image/png", vec![0x89, b'P', b'N', b'G'])
    }

    /// Text and a picture.
    #[tool]
    fn mixed(&self) -> Result<Vec<Content>, String> {
        Ok(vec![
            Content::text("look:"),
            Content::image("image/png", vec![1]),
        ])
    }

    /// Fails with content.
    #[tool]
    fn refuse(&self) -> ToolOutput {
        ToolOutput::error(vec![Content::text("not today")])
    }

    /// Adds.
    #[tool]
    fn add(&self, a: i64, b: i64) -> Sum {
        Sum { total: a + b }
    }

    /// Every note, one per line.
    #[resource(uri = "notes://all", name = "all notes", mime_type = "text/plain")]
    fn all(&self) -> String {
        self.saved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .join("\n")
    }

    #[resource(uri = "notes://logo", mime_type = "image/png")]
    fn logo(&self) -> Vec<u8> {
        vec![1, 2, 3]
    }

    /// One note, by its number (from 1).
    #[resource(template = "notes://note/{id}/text", name = "note", title = "A note")]
    fn note(&self, #[complete(note_ids)] id: String) -> Result<String, RequestError> {
        let saved = self.saved.lock().unwrap_or_else(|e| e.into_inner());
        let index: usize = id
            .parse()
            .map_err(|_| RequestError::InvalidArgument(format!("'{id}' is not a number")))?;
        index
            .checked_sub(1)
            .and_then(|at| saved.get(at).cloned())
            .ok_or_else(|| RequestError::NotFound(format!("no note {id}")))
    }

    #[resource(template = "notes://pair/{a}/{b}")]
    fn pair(&self, b: String, a: String) -> ResourceContents {
        ResourceContents::text(format!("notes://pair/{a}/{b}"), None, format!("{a}+{b}"))
    }

    fn note_ids(&self, value: &str) -> Vec<String> {
        let count = self.saved.lock().unwrap_or_else(|e| e.into_inner()).len();
        (1..=count)
            .map(|n| n.to_string())
            .filter(|n| n.starts_with(value))
            .collect()
    }

    /// Asks for a summary.
    #[prompt(title = "Summarise")]
    fn summarise(
        &self,
        #[description = "What to summarise"]
        #[complete(topics)]
        topic: String,
        #[description = "How long"] length: Option<String>,
    ) -> String {
        format!(
            "Summarise {topic} in {} words.",
            length.as_deref().unwrap_or("100")
        )
    }

    #[prompt]
    async fn dialogue(&self) -> Result<Vec<Message>, String> {
        Ok(vec![Message::user("Hi"), Message::assistant("Hello")])
    }

    fn topics(&self, value: &str) -> Vec<String> {
        ["owls", "otters", "eels"]
            .iter()
            .filter(|t| t.starts_with(value))
            .map(|t| (*t).to_owned())
            .collect()
    }
}

fn call(notes: &Notes, name: &str, input: &str) -> (Result<String, ToolError>, ToolOutput) {
    let definitions = notes.tool_definitions();
    let (_, tool) = definitions
        .iter()
        .map(|definition| definition())
        .find(|(meta, _)| meta.name == name)
        .unwrap_or_else(|| panic!("no tool {name}"));
    let text = block_on(tool.execute(input));
    let output = block_on(tool.call(input)).unwrap_or_else(|e| panic!("{name}: {e}"));
    (text, output)
}

/// Saves a note through the tool `save` (its `execute` and its `call`: twice).
fn save(notes: &Notes, text: &str) {
    let (saved, _) = call(notes, "save", &json!({ "text": text }).to_string());
    assert!(saved.is_ok());
}

#[test]
fn tools_answer_with_content_on_call_and_text_on_execute() {
    let notes = Notes::default();
    let (text, output) = call(&notes, "picture", "{}");
    assert_eq!(text.as_deref(), Ok("[image: image/png, 4 bytes]"));
    assert!(matches!(&output.content[..], [Content::Image(m)] if m.data.len() == 4));

    let (text, output) = call(&notes, "mixed", "{}");
    assert_eq!(text.as_deref(), Ok("look:\n[image: image/png, 1 bytes]"));
    assert_eq!(output.content.len(), 2);

    let (text, output) = call(&notes, "refuse", "{}");
    assert_eq!(text, Err(ToolError::ExecutionFailed("not today".into())));
    assert!(output.is_error);

    let (text, output) = call(&notes, "save", r#"{"text":"a"}"#);
    assert_eq!(text.as_deref(), Ok("saved 1"));
    assert_eq!(output, ToolOutput::text("saved 2"));
}

#[test]
fn structured_results_are_structured_on_call_and_json_on_execute() {
    let notes = Notes::default();
    let (text, output) = call(&notes, "add", r#"{"a":2,"b":3}"#);
    assert_eq!(text.as_deref(), Ok(r#"{"total":5}"#));
    assert_eq!(output.content, [Content::text(r#"{"total":5}"#)]);
    assert_eq!(output.structured, Some(json!({"total": 5})));
    assert_eq!(output.to_text(), r#"{"total":5}"#);
}

#[test]
fn resources_are_listed_and_read_with_the_tools_state() {
    let notes = Notes::default();
    save(&notes, "first");

    let listed = notes.resources();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].uri, "notes://all");
    assert_eq!(listed[0].name, "all notes");
    assert_eq!(
        listed[0].description.as_deref(),
        Some("Every note, one per line.")
    );
    assert_eq!(listed[1].name, "logo");
    assert_eq!(listed[1].description, None);

    // The tool saved through a clone of the value: both see the same state.
    let all = notes.read_resource("notes://all");
    assert_eq!(
        all,
        Ok(vec![ResourceContents::text(
            "notes://all",
            Some("text/plain"),
            "first\nfirst"
        )])
    );
    let logo = notes.read_resource("notes://logo").unwrap_or_default();
    assert_eq!(logo[0].data, ResourceData::Blob(vec![1, 2, 3]));
    assert_eq!(logo[0].mime_type.as_deref(), Some("image/png"));

    let missing = notes.read_resource("notes://none");
    assert!(
        matches!(missing, Err(RequestError::NotFound(t)) if t.contains("notes://note/{id}/text"))
    );
}

#[test]
fn templates_pass_their_variables_by_name() {
    let notes = Notes::default();
    save(&notes, "hello");
    let templates = notes.resource_templates();
    assert_eq!(templates[0].uri_template, "notes://note/{id}/text");
    assert_eq!(templates[0].title.as_deref(), Some("A note"));
    assert_eq!(
        templates[0].description.as_deref(),
        Some("One note, by its number (from 1).")
    );

    let note = notes.read_resource("notes://note/1/text");
    assert_eq!(
        note,
        Ok(vec![ResourceContents::text(
            "notes://note/1/text",
            None,
            "hello"
        )])
    );
    assert_eq!(
        notes.read_resource("notes://note/9/text"),
        Err(RequestError::NotFound("no note 9".into()))
    );
    assert!(matches!(
        notes.read_resource("notes://note/x/text"),
        Err(RequestError::InvalidArgument(_))
    ));
    let pair = notes.read_resource("notes://pair/x/y").unwrap_or_default();
    assert_eq!(pair[0].data, ResourceData::Text("x+y".into()));
}

#[test]
fn prompts_render_with_required_and_optional_arguments() {
    let notes = Notes::default();
    let prompts = notes.prompts();
    assert_eq!(prompts.len(), 2);
    assert_eq!(prompts[0].name, "summarise");
    assert_eq!(prompts[0].title.as_deref(), Some("Summarise"));
    assert_eq!(
        prompts[0].description.as_deref(),
        Some("Asks for a summary.")
    );
    assert_eq!(
        prompts[0].arguments[1],
        PromptArgument {
            name: "length".into(),
            title: None,
            description: Some("How long".into()),
            required: false,
        }
    );
    assert!(prompts[0].arguments[0].required);

    let args = [("topic".to_owned(), "owls".to_owned())];
    assert_eq!(
        notes.get_prompt("summarise", &args),
        Ok(Prompt {
            description: None,
            messages: vec![Message::user("Summarise owls in 100 words.")],
        })
    );
    let missing = notes.get_prompt("summarise", &[]);
    assert!(matches!(missing, Err(RequestError::InvalidArgument(t)) if t.contains("'topic'")));
    let dialogue = notes.get_prompt("dialogue", &[]).unwrap_or_default();
    assert_eq!(dialogue.messages.len(), 2);
    assert!(
        matches!(notes.get_prompt("nope", &[]), Err(RequestError::NotFound(t)) if t.contains("summarise, dialogue"))
    );
}

#[test]
fn completion_asks_the_named_method() {
    let notes = Notes::default();
    let topic = notes.complete(&CompletionRef::Prompt("summarise".into()), "topic", "o");
    assert_eq!(
        topic.map(|c| c.values),
        Ok(vec!["owls".into(), "otters".into()])
    );
    let length = notes.complete(&CompletionRef::Prompt("summarise".into()), "length", "");
    assert_eq!(length, Ok(Completion::default()));
    let unknown = notes.complete(&CompletionRef::Prompt("summarise".into()), "size", "");
    assert!(
        matches!(unknown, Err(RequestError::InvalidArgument(t)) if t.contains("topic, length"))
    );

    save(&notes, "a");
    let ids = notes.complete(
        &CompletionRef::ResourceTemplate("notes://note/{id}/text".into()),
        "id",
        "",
    );
    assert_eq!(ids.map(|c| c.values), Ok(vec!["1".into(), "2".into()]));
    let none = notes.complete(&CompletionRef::ResourceTemplate("x://{y}".into()), "y", "");
    assert!(matches!(none, Err(RequestError::NotFound(_))));
}

#[derive(Clone, Default)]
struct ToolsOnly;

#[tool_registry]
impl ToolsOnly {
    #[tool]
    fn ping(&self) -> &'static str {
        "pong"
    }
}

#[test]
fn a_registry_without_resources_or_prompts_lists_none() {
    assert!(ToolsOnly.resources().is_empty());
    assert!(ToolsOnly.resource_templates().is_empty());
    assert!(ToolsOnly.prompts().is_empty());
    assert!(matches!(
        ToolsOnly.read_resource("a://b"),
        Err(RequestError::NotFound(_))
    ));
    assert!(matches!(
        ToolsOnly.get_prompt("p", &[]),
        Err(RequestError::NotFound(_))
    ));
    assert!(matches!(
        ToolsOnly.complete(&CompletionRef::Prompt("p".into()), "a", ""),
        Err(RequestError::NotFound(_))
    ));
}

#[derive(Clone, Default)]
struct PromptsOnly;

#[tool_registry]
impl PromptsOnly {
    /// Greets.
    #[prompt]
    fn greet(&self, name: String) -> Result<Prompt, std::io::Error> {
        Ok(Prompt {
            description: Some(format!("A greeting for {name}")),
            messages: vec![Message::user(format!("Greet {name}"))],
        })
    }
}

#[test]
fn a_registry_may_hold_only_prompts() {
    assert!(PromptsOnly.tool_definitions().is_empty());
    let args = [("name".to_owned(), "Ada".to_owned())];
    let prompt = PromptsOnly.get_prompt("greet", &args).unwrap_or_default();
    assert_eq!(prompt.description.as_deref(), Some("A greeting for Ada"));
}

/// A registry whose type has lifetime arguments, an `async` resource answering with text it
/// borrows, and a template declared before the fixed URI it matches.
#[derive(Clone)]
struct Borrowing<'a> {
    text: &'a str,
}

#[tool_registry]
impl Borrowing<'static> {
    /// Repeats the text `times` times.
    #[tool]
    fn repeat(&self, #[default = 1] times: u32) -> String {
        self.text.repeat(times as usize)
    }

    /// Any page.
    #[resource(template = "pages://{name}", mime_type = "text/plain")]
    fn page(&self, name: String) -> String {
        format!("page {name}")
    }

    /// The text, answered by an `async` method that borrows it.
    #[resource(uri = "pages://text", mime_type = "text/plain")]
    async fn text(&self) -> &str {
        self.text
    }
}

#[test]
fn borrowed_async_answers_generic_registries_and_fixed_uris_first() {
    let registry = Borrowing { text: "ab" };
    let (_, tool) = registry.tool_definitions()[0]();
    assert_eq!(block_on(tool.execute("{}")).as_deref(), Ok("ab"));
    let read = |uri: &str| match registry.read_resource(uri) {
        Ok(contents) => match &contents[0].data {
            ResourceData::Text(text) => text.clone(),
            other => panic!("{other:?}"),
        },
        Err(error) => panic!("{error}"),
    };
    // The fixed URI is its method's, though the template before it matches it too.
    assert_eq!(read("pages://text"), "ab");
    assert_eq!(read("pages://other"), "page other");
    // The exports' path: the same answers.
    let asynchronously = block_on(registry.read_resource_async("pages://text")).expect("read");
    assert!(matches!(&asynchronously[0].data, ResourceData::Text(text) if text == "ab"));
}
