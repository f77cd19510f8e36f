//! The fixtures of the official MCP conformance suite (`@modelcontextprotocol/conformance`),
//! written as one plugin with the SDK: the tools, resources and prompts its server scenarios
//! call by name, with the behaviour they check (see `docs/conformance.md`).
//!
//! It is a test fixture, not an example of a useful tool; it does show every kind of content,
//! resources, prompts, completion and questions to the client in one place.

// The suite names a prompt argument `resourceUri`.
#![allow(non_snake_case)]

use std::time::Duration;

use llm_worker_guest::log;
use llm_worker_guest::{
    Content, ElicitationAnswer, Listing, Message, QuestionError, ResourceContents, SamplingRequest,
    Tool, ToolDefinition, ToolError, ToolMeta, ToolOutput, ToolRegistry, complete,
    elicit_with_schema, list_changed, progress, prompt, resource, roots, sample, tool,
    tool_registry,
};
use serde_json::{Value, json};

/// A red pixel, as PNG.
const PNG: &[u8] = &[
    137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82, 0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0,
    0, 0, 31, 21, 196, 137, 0, 0, 0, 13, 73, 68, 65, 84, 120, 218, 99, 252, 207, 192, 240, 31, 0,
    5, 5, 2, 0, 95, 200, 241, 210, 0, 0, 0, 0, 73, 69, 78, 68, 174, 66, 96, 130,
];

/// The shortest WAV file.
const WAV: &[u8] = &[
    82, 73, 70, 70, 38, 0, 0, 0, 87, 65, 86, 69, 102, 109, 116, 32, 16, 0, 0, 0, 1, 0, 1, 0, 64,
    31, 0, 0, 0, 125, 0, 0, 2, 0, 16, 0, 100, 97, 116, 97, 2, 0, 0, 0,
];

/// The fixtures; they keep no state.
#[derive(Clone, Default)]
pub struct Conformance;

/// A form's answer as the suite's fixtures print it.
fn describe(answer: &ElicitationAnswer) -> String {
    match answer {
        ElicitationAnswer::Accept(content) => {
            format!("action=accept, content={}", Value::Object(content.clone()))
        }
        ElicitationAnswer::Decline => "action=decline".to_owned(),
        ElicitationAnswer::Cancel => "action=cancel".to_owned(),
    }
}

/// A one-field form.
fn form(field: &str, kind: &str) -> Value {
    json!({"type": "object", "properties": {field: {"type": kind}}, "required": [field]})
}

/// A form of a name and a confirmation, both optional.
fn confirmation_form() -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "confirm": {"type": "boolean"}},
    })
}

/// Awaits both futures at once (their questions are asked together).
async fn both<A: std::future::Future, B: std::future::Future>(
    a: A,
    b: B,
) -> (A::Output, B::Output) {
    use std::task::Poll;
    let (mut a, mut b) = (std::pin::pin!(a), std::pin::pin!(b));
    let (mut first, mut second) = (None, None);
    std::future::poll_fn(|cx| {
        if first.is_none()
            && let Poll::Ready(output) = a.as_mut().poll(cx)
        {
            first = Some(output);
        }
        if second.is_none()
            && let Poll::Ready(output) = b.as_mut().poll(cx)
        {
            second = Some(output);
        }
        match (first.take(), second.take()) {
            (Some(a), Some(b)) => Poll::Ready((a, b)),
            (a, b) => {
                (first, second) = (a, b);
                Poll::Pending
            }
        }
    })
    .await
}

/// The text of a form's field, if the user accepted and gave one.
fn accepted(answer: &ElicitationAnswer, field: &str) -> Option<String> {
    match answer {
        ElicitationAnswer::Accept(content) => match content.get(field)? {
            Value::String(text) => Some(text.clone()),
            other => Some(other.to_string()),
        },
        _ => None,
    }
}

fn sampled_text(answer: &llm_worker_guest::SamplingAnswer) -> String {
    match &answer.content {
        Content::Text(text) => text.clone(),
        other => {
            let mut text = String::new();
            other.write_text(&mut text);
            text
        }
    }
}

fn pause() {
    std::thread::sleep(Duration::from_millis(60));
}

#[tool_registry]
impl Conformance {
    /// Returns a simple text.
    #[tool]
    fn test_simple_text(&self) -> &'static str {
        "This is a simple text response for testing."
    }

    /// Returns an image (a red pixel, PNG).
    #[tool]
    fn test_image_content(&self) -> Content {
        Content::image("image/png", PNG)
    }

    /// Returns an audio clip (WAV).
    #[tool]
    fn test_audio_content(&self) -> Content {
        Content::audio("audio/wav", WAV)
    }

    /// Returns an embedded text resource.
    #[tool]
    fn test_embedded_resource(&self) -> Content {
        Content::Resource(ResourceContents::text(
            "test://embedded-resource",
            Some("text/plain"),
            "This is an embedded resource content.",
        ))
    }

    /// Returns text, an image and an embedded resource.
    #[tool]
    fn test_multiple_content_types(&self) -> Vec<Content> {
        vec![
            Content::text("Multiple content types test:"),
            Content::image("image/png", PNG),
            Content::Resource(ResourceContents::text(
                "test://mixed-content-resource",
                Some("application/json"),
                r#"{"test":"data","value":123}"#,
            )),
        ]
    }

    /// Logs three messages while it runs.
    #[tool]
    fn test_tool_with_logging(&self) -> &'static str {
        log::info!("Tool execution started");
        pause();
        log::info!("Tool processing data");
        pause();
        log::info!("Tool execution completed");
        "Tool with logging executed successfully"
    }

    /// Reports progress 0, 50 and 100 of 100 while it runs.
    #[tool]
    fn test_tool_with_progress(&self) -> &'static str {
        progress(0.0, Some(100.0), None);
        pause();
        progress(50.0, Some(100.0), None);
        pause();
        progress(100.0, Some(100.0), None);
        "Progress test completed"
    }

    /// Waits `seconds` seconds, then says it computed `label`: long enough to run as a task.
    #[tool(task = "optional")]
    async fn slow_compute(
        &self,
        #[description = "How long to work, in seconds"] seconds: f64,
        #[description = "What to compute"] label: Option<String>,
    ) -> Result<String, String> {
        if !(0.0..=3600.0).contains(&seconds) {
            return Err(format!("seconds must be 0 to 3600, not {seconds}"));
        }
        llm_worker_guest::time::sleep(std::time::Duration::from_secs_f64(seconds)).await;
        Ok(format!(
            "Computed {} after {seconds} seconds",
            label.as_deref().unwrap_or("the result")
        ))
    }

    /// Fails as a tool after about a second; it always runs as a task.
    #[tool(task = "required")]
    async fn failing_job(&self) -> Result<String, String> {
        llm_worker_guest::time::sleep(std::time::Duration::from_secs(1)).await;
        Err("the job failed, as it always does".into())
    }

    /// Fails inside (an internal error, not a tool's answer): a task that ends `failed`.
    #[tool(task = "optional")]
    async fn protocol_error_job(&self) -> Result<String, ToolError> {
        Err(ToolError::Internal(
            "the job broke down inside, as it always does".into(),
        ))
    }

    /// Asks the user to confirm deleting `filename` (one question), then says what it did.
    #[tool(task = "optional")]
    async fn confirm_delete(
        &self,
        #[description = "The file to delete"] filename: String,
    ) -> Result<String, QuestionError> {
        let answer = elicit_with_schema(
            "confirm",
            &format!("Delete {filename}?"),
            confirmation_form(),
        )
        .await?;
        Ok(match accepted(&answer, "confirm").as_deref() {
            Some("true") => format!("Deleted {filename}"),
            _ => format!("Kept {filename}"),
        })
    }

    /// Asks the user's name inside the request (its rounds, on 2026-07-28), then becomes a
    /// task that greets them (logging that it does).
    #[tool(task = "required", manual_start)]
    async fn test_tool_with_task(&self) -> Result<String, QuestionError> {
        log::info!("asking the user's name");
        let answer = elicit_with_schema(
            "user_name",
            "What is your name?",
            json!({
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            }),
        )
        .await?;
        llm_worker_guest::task::start();
        let name = accepted(&answer, "name").unwrap_or_else(|| "nobody".into());
        log::info!("greeting {name}");
        Ok(format!("Hello, {name}!"))
    }

    /// Asks the user two questions at once, and says what both answers were.
    #[tool(task = "optional")]
    async fn multi_input(&self) -> Result<String, QuestionError> {
        let (first, second) = both(
            elicit_with_schema("first", "The first input, please", confirmation_form()),
            elicit_with_schema("second", "The second input, please", confirmation_form()),
        )
        .await;
        let (first, second) = (first?, second?);
        Ok(format!(
            "first: {}, second: {}",
            accepted(&first, "name").unwrap_or_default(),
            accepted(&second, "name").unwrap_or_default()
        ))
    }

    /// Fails, telling why as its content.
    #[tool]
    fn test_error_handling(&self) -> ToolOutput {
        ToolOutput::error(vec![Content::text(
            "This tool intentionally returns an error for testing",
        )])
    }

    /// Asks the client's model to answer the prompt.
    #[tool]
    async fn test_sampling(
        &self,
        #[description = "What to ask the model"] prompt: String,
    ) -> Result<String, QuestionError> {
        let answer = sample(
            "llm",
            SamplingRequest {
                messages: vec![Message::user(prompt)],
                max_tokens: 100,
                ..SamplingRequest::default()
            },
        )
        .await?;
        Ok(format!("LLM response: {}", sampled_text(&answer)))
    }

    /// Asks the user for a user name and an e-mail address.
    #[tool]
    async fn test_elicitation(
        &self,
        #[description = "What to tell the user"] message: String,
    ) -> Result<String, QuestionError> {
        let schema = json!({
            "type": "object",
            "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"}
            },
            "required": ["username", "email"]
        });
        let answer = elicit_with_schema("user_info", &message, schema).await?;
        Ok(format!("User response: {}", describe(&answer)))
    }

    /// Asks the user to review a form whose fields have defaults (SEP-1034).
    #[tool]
    async fn test_elicitation_sep1034_defaults(&self) -> Result<String, QuestionError> {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                "age": {"type": "integer", "description": "User age", "default": 30},
                "score": {"type": "number", "description": "User score", "default": 95.5},
                "status": {
                    "type": "string",
                    "description": "User status",
                    "enum": ["active", "inactive", "pending"],
                    "default": "active"
                },
                "verified": {"type": "boolean", "description": "Verified", "default": true}
            },
            "required": []
        });
        let answer = elicit_with_schema(
            "defaults",
            "Please review and update the form fields with defaults",
            schema,
        )
        .await?;
        Ok(format!("Elicitation completed: {}", describe(&answer)))
    }

    /// Asks the user to choose from enums of every kind (SEP-1330).
    #[tool]
    async fn test_elicitation_sep1330_enums(&self) -> Result<String, QuestionError> {
        let choices = |titles: [&str; 3]| {
            titles
                .iter()
                .enumerate()
                .map(|(at, title)| json!({"const": format!("value{}", at + 1), "title": title}))
                .collect::<Vec<_>>()
        };
        let schema = json!({
            "type": "object",
            "properties": {
                "untitledSingle": {
                    "type": "string",
                    "description": "Choose one",
                    "enum": ["option1", "option2", "option3"]
                },
                "titledSingle": {
                    "type": "string",
                    "description": "Choose one",
                    "oneOf": choices(["First Option", "Second Option", "Third Option"])
                },
                "legacyEnum": {
                    "type": "string",
                    "description": "Choose one",
                    "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"]
                },
                "untitledMulti": {
                    "type": "array",
                    "description": "Choose some",
                    "minItems": 1,
                    "maxItems": 3,
                    "items": {"type": "string", "enum": ["option1", "option2", "option3"]}
                },
                "titledMulti": {
                    "type": "array",
                    "description": "Choose some",
                    "minItems": 1,
                    "maxItems": 3,
                    "items": {"anyOf": choices(["First Choice", "Second Choice", "Third Choice"])}
                }
            },
            "required": []
        });
        let answer = elicit_with_schema("enums", "Please choose from the enums", schema).await?;
        Ok(format!("Elicitation completed: {}", describe(&answer)))
    }

    /// Needs the client's sampling capability (server-stateless).
    #[tool]
    async fn test_missing_capability(&self) -> Result<&'static str, QuestionError> {
        sample(
            "needs_sampling",
            SamplingRequest {
                messages: vec![Message::user("Say success")],
                max_tokens: 10,
                ..SamplingRequest::default()
            },
        )
        .await?;
        Ok("Success")
    }

    /// Asks the user for confirmation; never sends requests on its response stream.
    #[tool]
    async fn test_streaming_elicitation(&self) -> Result<&'static str, QuestionError> {
        elicit_with_schema("stream_confirm", "Please confirm", form("ok", "boolean")).await?;
        Ok("Streaming complete")
    }

    /// Logs at info; clients see it only at the level they asked for.
    #[tool]
    fn test_logging_tool(&self) -> &'static str {
        log::info!("Logging tool ran");
        "Logging evaluated"
    }

    /// Says that this plugin's prompts changed (clients subscribed to the change are told).
    #[tool]
    fn test_trigger_prompt_change(&self) -> &'static str {
        list_changed(Listing::Prompts);
        "Mutation triggered"
    }

    /// Asks the user's name (revision 2026-07-28: answered input_required).
    #[tool]
    async fn test_input_required_result_elicitation(&self) -> Result<String, QuestionError> {
        let answer =
            elicit_with_schema("user_name", "What is your name?", form("name", "string")).await?;
        match accepted(&answer, "name") {
            Some(name) => Ok(format!("Hello, {name}!")),
            None => Ok(format!("No name given ({})", describe(&answer))),
        }
    }

    /// Asks the client's model a question.
    #[tool]
    async fn test_input_required_result_sampling(&self) -> Result<String, QuestionError> {
        let answer = sample(
            "capital_question",
            SamplingRequest {
                messages: vec![Message::user("What is the capital of France?")],
                max_tokens: 100,
                ..SamplingRequest::default()
            },
        )
        .await?;
        Ok(format!("Sampling result: {}", sampled_text(&answer)))
    }

    /// Reads the client's roots.
    #[tool]
    async fn test_input_required_result_list_roots(&self) -> Result<String, QuestionError> {
        let found = roots("client_roots").await?;
        Ok(format!("Found {} root(s)", found.len()))
    }

    /// Asks for a confirmation carried across the retry by the request state.
    #[tool]
    async fn test_input_required_result_request_state(&self) -> Result<String, QuestionError> {
        elicit_with_schema("confirm", "Please confirm", form("ok", "boolean")).await?;
        Ok("state-ok: requestState validated".to_owned())
    }

    /// Asks three questions at once: a form, the model and the roots.
    #[tool]
    async fn test_input_required_result_multiple_inputs(&self) -> Result<String, QuestionError> {
        // Ask all three before giving up on any: the client answers them together.
        let name =
            elicit_with_schema("user_name", "What is your name?", form("name", "string")).await;
        let greeting = sample(
            "greeting",
            SamplingRequest {
                messages: vec![Message::user("Generate a greeting")],
                max_tokens: 50,
                ..SamplingRequest::default()
            },
        )
        .await;
        let found = roots("client_roots").await;
        let (name, greeting, found) = (name?, greeting?, found?);
        Ok(format!(
            "Name: {}; Greeting: {}; Roots: {}",
            accepted(&name, "name").unwrap_or_default(),
            sampled_text(&greeting),
            found.len()
        ))
    }

    /// Asks two questions, one after the other.
    #[tool]
    async fn test_input_required_result_multi_round(&self) -> Result<String, QuestionError> {
        let name = elicit_with_schema(
            "step1",
            "Step 1: What is your name?",
            form("name", "string"),
        )
        .await?;
        let colour = elicit_with_schema(
            "step2",
            "Step 2: What is your favorite color?",
            form("color", "string"),
        )
        .await?;
        Ok(format!(
            "Multi-round complete for {} who likes {}",
            accepted(&name, "name").unwrap_or_default(),
            accepted(&colour, "color").unwrap_or_default()
        ))
    }

    /// Asks for a confirmation; a tampered request state is refused by the host.
    #[tool]
    async fn test_input_required_result_tampered_state(&self) -> Result<String, QuestionError> {
        elicit_with_schema("confirm", "Please confirm", form("ok", "boolean")).await?;
        Ok("integrity-ok: state verified".to_owned())
    }

    /// Asks only what the client declared it can answer.
    #[tool]
    async fn test_input_required_result_capabilities(&self) -> Result<String, QuestionError> {
        let asked = [
            elicit_with_schema("user_input", "Your input?", form("input", "string"))
                .await
                .map(|_| ()),
            sample(
                "sample_input",
                SamplingRequest {
                    messages: vec![Message::user("Sample request")],
                    max_tokens: 50,
                    ..SamplingRequest::default()
                },
            )
            .await
            .map(|_| ()),
            roots("roots_input").await.map(|_| ()),
        ];
        // What the client cannot answer is skipped; what it will answer is waited for.
        for outcome in asked {
            if let Err(deferred @ QuestionError::Deferred(_)) = outcome {
                return Err(deferred);
            }
        }
        Ok("capabilities respected".to_owned())
    }

    /// The static text resource.
    #[resource(
        uri = "test://static-text",
        name = "static-text",
        mime_type = "text/plain"
    )]
    fn static_text(&self) -> &'static str {
        "This is the content of the static text resource."
    }

    /// The static binary resource (a red pixel).
    #[resource(
        uri = "test://static-binary",
        name = "static-binary",
        mime_type = "image/png"
    )]
    fn static_binary(&self) -> Vec<u8> {
        PNG.to_vec()
    }

    /// A resource to subscribe to.
    #[resource(
        uri = "test://watched-resource",
        name = "watched-resource",
        mime_type = "text/plain"
    )]
    fn watched_resource(&self) -> &'static str {
        "Watched resource content"
    }

    /// Data for an id.
    #[resource(
        template = "test://template/{id}/data",
        name = "template",
        mime_type = "application/json"
    )]
    fn template_data(&self, id: String) -> String {
        json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string()
    }

    /// A simple prompt.
    #[prompt]
    fn test_simple_prompt(&self) -> &'static str {
        "This is a simple prompt for testing."
    }

    /// A prompt with two arguments.
    #[prompt]
    fn test_prompt_with_arguments(
        &self,
        #[description = "The first argument"]
        #[complete(suggest_arg1)]
        arg1: String,
        #[description = "The second argument"] arg2: String,
    ) -> String {
        format!("Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")
    }

    /// Values for `arg1` that start with what is typed.
    fn suggest_arg1(&self, typed: &str) -> Vec<String> {
        ["test", "testing", "value"]
            .into_iter()
            .filter(|value| value.starts_with(typed))
            .map(str::to_owned)
            .collect()
    }

    /// A prompt with an embedded resource.
    #[prompt]
    fn test_prompt_with_embedded_resource(
        &self,
        #[description = "The URI of the resource to embed"] resourceUri: String,
    ) -> Vec<Message> {
        vec![
            Message::user(Content::Resource(ResourceContents::text(
                resourceUri,
                Some("text/plain"),
                "Embedded resource content for testing.",
            ))),
            Message::user("Please process the embedded resource above."),
        ]
    }

    /// A prompt with an image.
    #[prompt]
    fn test_prompt_with_image(&self) -> Vec<Message> {
        vec![
            Message::user(Content::image("image/png", PNG)),
            Message::user("Please analyze the image above."),
        ]
    }

    /// A prompt that asks the user for context first.
    #[prompt]
    async fn test_input_required_result_prompt(&self) -> Result<String, QuestionError> {
        let answer = elicit_with_schema(
            "user_context",
            "What context should the prompt use?",
            form("context", "string"),
        )
        .await?;
        Ok(format!(
            "Prompt with context: {}",
            accepted(&answer, "context").unwrap_or_default()
        ))
    }
}

/// The tool `json_schema_2020_12_tool`: its input schema is written by hand, as the suite
/// gives it (`$schema`, `$defs` with an `$anchor`, `allOf`/`anyOf`, `if`/`then`/`else`,
/// `additionalProperties`), which no Rust type derives. It is made with the spec's API, a
/// [`ToolDefinition`] factory, beside the `#[tool_registry]` ones.
struct JsonSchemaTool;

#[async_trait::async_trait]
impl Tool for JsonSchemaTool {
    async fn execute(&self, _input_json: &str) -> Result<String, ToolError> {
        Ok("ok".to_owned())
    }
}

fn json_schema_2020_12_tool() -> ToolDefinition {
    std::sync::Arc::new(|| {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "$anchor": "addressDef",
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}}
                }
            },
            "properties": {
                "name": {"type": "string"},
                "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"},
                "email": {"type": "string"}
            },
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": false
        });
        let meta = ToolMeta::new("json_schema_2020_12_tool")
            .description("Tool with JSON Schema 2020-12 features")
            .input_schema(schema);
        (
            meta,
            std::sync::Arc::new(JsonSchemaTool) as std::sync::Arc<dyn Tool>,
        )
    })
}

/// The tool `test_x_mcp_header`: its `region` argument is also sent as the HTTP header
/// `Mcp-Param-Region` (SEP-2243, `x-mcp-header` in the input schema), which the server checks
/// against the body. It says which region it was given.
struct HeaderTool;

#[async_trait::async_trait]
impl Tool for HeaderTool {
    async fn execute(&self, input_json: &str) -> Result<String, ToolError> {
        let input: Value = serde_json::from_str(input_json)
            .map_err(|error| ToolError::InvalidArgument(error.to_string()))?;
        Ok(format!(
            "region: {}",
            input["region"].as_str().unwrap_or_default()
        ))
    }
}

fn test_x_mcp_header() -> ToolDefinition {
    std::sync::Arc::new(|| {
        let schema = json!({
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region", "description": "A region"}
            },
            "required": ["region"]
        });
        let meta = ToolMeta::new("test_x_mcp_header")
            .description("Says which region it was given, also sent as the Mcp-Param-Region header")
            .input_schema(schema);
        (
            meta,
            std::sync::Arc::new(HeaderTool) as std::sync::Arc<dyn Tool>,
        )
    })
}

/// The `#[tool_registry]` fixtures and the hand-made ones, as one registry.
#[derive(Default)]
pub struct Fixtures(Conformance);

impl ToolRegistry for Fixtures {
    fn tool_definitions(&self) -> Vec<ToolDefinition> {
        let mut tools = self.0.tool_definitions();
        tools.push(json_schema_2020_12_tool());
        tools.push(test_x_mcp_header());
        tools
    }

    llm_worker_guest::forward_offerings!(0);
}

llm_worker_guest::export_plugin!(Fixtures);
