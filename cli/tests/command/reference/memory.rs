//! `@modelcontextprotocol/server-memory` beside our `memory` plugin: the same listing, the
//! same answers and errors, the same memory file after the same calls, files moving between
//! the two both ways, two sessions writing at once, and the attacks on the file.
//!
//! Normalisations, each named where it is applied:
//! - **structured key order**: structured values are compared as parsed JSON (the texts,
//!   indented JSON on both sides, are compared as they are, byte for byte).
//! - **error framing**: our host says `Execution failed: …` before a tool's own message; the
//!   message after it must be the original's.
//! - **input validation wording**: input that does not fit the schema is an error result on
//!   both sides, worded by each one's validator (zod's, our host's): only that both are errors,
//!   and that ours names the argument, is compared.
//! - **read-only hints**: the original says `readOnlyHint: true` on its three reading tools;
//!   ours says nothing, since the plugin's read-write directory makes our host drop that claim.
//!   Every other hint is compared.

use std::path::Path;

use rmcp::model::ReadResourceRequestParams;
use serde_json::{Value, json};

use llm_worker_tests::reference::{MEMORY, memory_dir as our_dir, memory_original as theirs};

use super::{Answer, Session, call, call_text, ours, program, shapes};

impl Answer {
    /// The structured value of a result that is not an error.
    fn graph(&self) -> &Value {
        assert!(!self.is_error, "an error: {}", self.text);
        self.structured.as_ref().expect("a structured value")
    }
}

/// Sends the same call to both and checks that they answer alike: the same text, the same
/// structured value (**structured key order**), or the same error message (**error
/// framing**). Returns our answer.
async fn same(theirs: &Session, ours: &Session, tool: &'static str, arguments: Value) -> Answer {
    let expected = call(theirs, tool, arguments.clone()).await;
    let actual = call(ours, tool, arguments.clone()).await;
    assert_eq!(
        actual.is_error, expected.is_error,
        "{tool} {arguments}: {actual:?} / {expected:?}"
    );
    if expected.is_error {
        let message = actual
            .text
            .strip_prefix("Execution failed: ")
            .unwrap_or_else(|| {
                panic!(
                    "{tool} {arguments}: our error is not a tool's failure: {}",
                    actual.text
                )
            });
        assert_eq!(message, expected.text, "{tool} {arguments}");
    } else {
        assert_eq!(actual.text, expected.text, "{tool} {arguments}: the text");
        assert_eq!(
            actual.structured, expected.structured,
            "{tool} {arguments}: the structure"
        );
    }
    actual
}

/// What the resource `memory://knowledge-graph` holds.
async fn graph_resource(session: &Session) -> Value {
    let result = session
        .read_resource(ReadResourceRequestParams::new("memory://knowledge-graph"))
        .await
        .expect("resources/read");
    serde_json::to_value(&result.contents).expect("contents")
}

/// A memory file's lines, each parsed (a missing file has none).
fn lines(file: &Path) -> Vec<Value> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(error) => panic!("{}: {error}", file.display()),
    };
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}")))
        .collect()
}

/// A knowledge graph's worth of inputs, with text that JSON must escape.
fn people() -> Value {
    json!([
        {"name": "Ada", "entityType": "person", "observations": ["wrote \"Notes\"", "naïve\ttab\nline \u{1}😀"]},
        {"name": "Babbage", "entityType": "person", "observations": []},
        {"name": "Engine", "entityType": "machine", "observations": ["analytical"]},
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listing_is_the_originals() {
    let Some(program) = program(MEMORY) else {
        return;
    };
    let (dir, data, _scratch) = our_dir("");
    let theirs = theirs(&program, &data.join("theirs.jsonl")).await;
    let ours = ours(&dir).await;
    assert_eq!(shapes(&ours).await, shapes(&theirs).await);

    let mut expected = theirs.list_all_tools().await.expect("their tools");
    let mut actual = ours.list_all_tools().await.expect("our tools");
    expected.sort_by(|a, b| a.name.cmp(&b.name));
    actual.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(actual.len(), 9);
    for (actual, expected) in actual.iter().zip(&expected) {
        let name = &expected.name;
        assert_eq!(actual.name, expected.name);
        assert_eq!(actual.title, expected.title, "{name}: title");
        assert_eq!(
            actual.description, expected.description,
            "{name}: description"
        );
        // The descriptions of the arguments, and of the fields of their items.
        let described = |schema: &Value| -> Vec<(String, Value)> {
            let mut found = Vec::new();
            collect_descriptions(schema, schema, "", &mut found);
            found.sort_by(|a, b| a.0.cmp(&b.0));
            found
        };
        let schema = |tool: &rmcp::model::Tool| Value::Object((*tool.input_schema).clone());
        assert_eq!(
            described(&schema(actual)),
            described(&schema(expected)),
            "{name}: input"
        );
        // The structured result's fields.
        let output = |tool: &rmcp::model::Tool| {
            let schema = tool.output_schema.as_ref().expect("an output schema");
            (
                schema
                    .get("properties")
                    .map(|p| p.as_object().map(|p| p.keys().cloned().collect::<Vec<_>>())),
                schema.get("required").cloned(),
            )
        };
        assert_eq!(output(actual), output(expected), "{name}: output schema");
        // The hints, but the read-only claims our host drops (**read-only hints**).
        let their_hints = expected.annotations.clone().expect("their hints");
        let our_hints = actual.annotations.clone().expect("our hints");
        let read_only = their_hints.read_only_hint.filter(|claim| !claim);
        assert_eq!(our_hints.read_only_hint, read_only, "{name}: readOnlyHint");
        assert_eq!(
            our_hints.destructive_hint, their_hints.destructive_hint,
            "{name}"
        );
        assert_eq!(
            our_hints.idempotent_hint, their_hints.idempotent_hint,
            "{name}"
        );
        assert_eq!(
            our_hints.open_world_hint, their_hints.open_world_hint,
            "{name}"
        );
    }

    let resources = |list: rmcp::model::ListResourcesResult| {
        list.resources
            .into_iter()
            .map(|r| (r.uri, r.name, r.title, r.description, r.mime_type))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        resources(ours.list_resources(None).await.expect("our resources")),
        resources(theirs.list_resources(None).await.expect("their resources")),
    );
}

/// Every `description` in `schema` (following `$ref`s within `root`), by the path of
/// property names that leads to it.
fn collect_descriptions(root: &Value, schema: &Value, at: &str, found: &mut Vec<(String, Value)>) {
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let target = reference
            .strip_prefix("#/")
            .map(|pointer| root.pointer(&format!("/{pointer}")))
            .unwrap_or_else(|| panic!("a $ref outside the schema: {reference}"))
            .unwrap_or_else(|| panic!("a dangling $ref: {reference}"));
        return collect_descriptions(root, target, at, found);
    }
    if let Some(description) = schema.get("description") {
        found.push((at.to_owned(), description.clone()));
    }
    if let Some(items) = schema.get("items") {
        collect_descriptions(root, items, &format!("{at}[]"), found);
    }
    if let Some(Value::Object(properties)) = schema.get("properties") {
        for (name, property) in properties {
            collect_descriptions(root, property, &format!("{at}/{name}"), found);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_calls_give_the_same_answers_and_the_same_file() {
    let Some(program) = program(MEMORY) else {
        return;
    };
    let (dir, data, scratch) = our_dir("");
    let their_file = scratch.join("theirs.jsonl");
    let theirs = theirs(&program, &their_file).await;
    let ours = ours(&dir).await;
    let (t, o) = (&theirs, &ours);

    // Reading a graph that has no file yet.
    same(t, o, "read_graph", json!({})).await;
    let created = same(t, o, "create_entities", json!({ "entities": people() })).await;
    assert_eq!(created.graph()["entities"], people());
    // An existing name is skipped; the others are created.
    let again = json!({ "entities": [people()[0], {"name": "Lovelace", "entityType": "title", "observations": []}] });
    let created = same(t, o, "create_entities", again).await;
    assert_eq!(created.graph()["entities"][0]["name"], "Lovelace");

    // Names repeated within one call are both created, and unknown fields of an item are
    // dropped, by both.
    let twins = json!({ "entities": [
        {"name": "Twin", "entityType": "t", "observations": [], "extra": 1},
        {"name": "Twin", "entityType": "u", "observations": ["second"]},
    ]});
    same(t, o, "create_entities", twins).await;
    let relations = json!([
        {"from": "Ada", "to": "Babbage", "relationType": "corresponded with"},
        {"from": "Babbage", "to": "Engine", "relationType": "designed"},
        {"from": "Ada", "to": "Ghost", "relationType": "imagined"},
    ]);
    same(t, o, "create_relations", json!({ "relations": relations })).await;
    let again = same(
        t,
        o,
        "create_relations",
        json!({ "relations": [relations[1]] }),
    )
    .await;
    assert_eq!(again.graph()["relations"], json!([]));

    let added = same(
        t,
        o,
        "add_observations",
        json!({ "observations": [
            {"entityName": "Ada", "contents": ["wrote \"Notes\"", "first programmer"]},
            {"entityName": "Engine", "contents": ["never finished"]},
        ]}),
    )
    .await;
    assert_eq!(
        added.graph()["results"][0]["addedObservations"],
        json!(["first programmer"])
    );
    // A missing entity: an error, and nothing added to the others.
    let missing = same(
        t,
        o,
        "add_observations",
        json!({ "observations": [
            {"entityName": "Engine", "contents": ["steam"]},
            {"entityName": "Nobody", "contents": ["x"]},
        ]}),
    )
    .await;
    assert!(
        missing.text.contains("Entity with name Nobody not found"),
        "{}",
        missing.text
    );

    for query in ["ENGINE", "", "programmer", "naïve", "zzz"] {
        same(t, o, "search_nodes", json!({ "query": query })).await;
    }
    let opened = same(
        t,
        o,
        "open_nodes",
        json!({ "names": ["Babbage", "Nobody"] }),
    )
    .await;
    assert_eq!(
        opened.graph()["relations"].as_array().map(Vec::len),
        Some(2)
    );

    same(
        t,
        o,
        "delete_observations",
        json!({ "deletions": [
            {"entityName": "Ada", "observations": ["first programmer", "not there"]},
            {"entityName": "Nobody", "observations": ["x"]},
        ]}),
    )
    .await;
    same(
        t,
        o,
        "delete_relations",
        json!({ "relations": [relations[2], {"from": "A", "to": "B", "relationType": "none"}] }),
    )
    .await;
    same(
        t,
        o,
        "delete_entities",
        json!({ "entityNames": ["Babbage", "Nobody", "Twin"] }),
    )
    .await;
    let graph = same(t, o, "read_graph", json!({})).await;
    assert_eq!(graph.graph()["entities"].as_array().map(Vec::len), Some(3));
    assert_eq!(
        graph.graph()["relations"],
        json!([]),
        "Babbage's relations went with him"
    );

    // The resource holding the whole graph.
    assert_eq!(graph_resource(o).await, graph_resource(t).await);

    // Input that does not fit: an error result on both sides (**input validation wording**).
    for (tool, arguments, named) in [
        (
            "create_entities",
            json!({ "entities": [{"name": "x"}] }),
            "entityType",
        ),
        ("search_nodes", json!({ "query": 5 }), "query"),
        ("delete_entities", json!({}), "entityNames"),
    ] {
        let expected = call(t, tool, arguments.clone()).await;
        let actual = call(o, tool, arguments.clone()).await;
        assert!(expected.is_error, "theirs took {tool} {arguments}");
        assert!(
            actual.is_error,
            "ours took {tool} {arguments}: {}",
            actual.text
        );
        assert!(actual.text.contains(named), "{tool}: {}", actual.text);
    }

    // The same file, line by line, and byte for byte.
    let our_file = data.join("memory.jsonl");
    assert_eq!(lines(&our_file), lines(&their_file));
    assert_eq!(
        std::fs::read(&our_file).expect("ours"),
        std::fs::read(&their_file).expect("theirs")
    );
    let names: Vec<Value> = lines(&our_file)
        .iter()
        .map(|line| line["name"].clone())
        .collect();
    assert_eq!(names, [json!("Ada"), json!("Engine"), json!("Lovelace")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_file_moves_between_the_two_both_ways() {
    let Some(program) = program(MEMORY) else {
        return;
    };
    let (dir, data, scratch) = our_dir("");
    let their_file = scratch.join("theirs.jsonl");
    let our_file = data.join("memory.jsonl");
    let theirs = theirs(&program, &their_file).await;
    let ours = ours(&dir).await;

    // Theirs writes; ours reads it and changes it.
    call(&theirs, "create_entities", json!({ "entities": people() }))
        .await
        .graph();
    let relation = json!({"from": "Ada", "to": "Engine", "relationType": "programmed"});
    call(
        &theirs,
        "create_relations",
        json!({ "relations": [relation] }),
    )
    .await
    .graph();
    std::fs::copy(&their_file, &our_file).expect("theirs to ours");
    let their_graph = call(&theirs, "read_graph", json!({})).await;
    let our_graph = call(&ours, "read_graph", json!({})).await;
    assert_eq!(our_graph.graph(), their_graph.graph());
    assert_eq!(our_graph.text, their_graph.text);
    let more =
        json!({ "observations": [{"entityName": "Babbage", "contents": ["mathematician"]}] });
    call(&ours, "add_observations", more).await.graph();
    call(
        &ours,
        "delete_entities",
        json!({ "entityNames": ["Engine"] }),
    )
    .await
    .graph();

    // Ours wrote; theirs reads it.
    std::fs::copy(&our_file, &their_file).expect("ours to theirs");
    let our_graph = call(&ours, "read_graph", json!({})).await;
    let their_graph = call(&theirs, "read_graph", json!({})).await;
    assert_eq!(their_graph.graph(), our_graph.graph());
    assert_eq!(
        their_graph.graph()["entities"][1]["observations"],
        json!(["mathematician"])
    );
    assert_eq!(their_graph.graph()["relations"], json!([]));
}

/// Calls of one session in [`two_sessions_writing_at_once_lose_nothing`]: entities of its own,
/// and observations added to the one entity both sessions change.
async fn write(session: &Session, who: &str, calls: usize) {
    for n in 0..calls {
        let entity = json!({"name": format!("{who}-{n}"), "entityType": "t", "observations": [format!("{n}")]});
        call(session, "create_entities", json!({ "entities": [entity] }))
            .await
            .graph();
        let observation = json!({"entityName": "Shared", "contents": [format!("{who}-{n}")]});
        call(
            session,
            "add_observations",
            json!({ "observations": [observation] }),
        )
        .await
        .graph();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_writing_at_once_lose_nothing() {
    let (dir, data, _scratch) = our_dir("");
    let (first, second) = tokio::join!(ours(&dir), ours(&dir));
    call(
        &first,
        "create_entities",
        json!({ "entities": [{"name": "Shared", "entityType": "t", "observations": []}] }),
    )
    .await
    .graph();
    const CALLS: usize = 40;
    tokio::join!(
        write(&first, "first", CALLS),
        write(&second, "second", CALLS)
    );

    let graph = call(&second, "read_graph", json!({})).await;
    let entities = graph.graph()["entities"]
        .as_array()
        .expect("entities")
        .clone();
    assert_eq!(entities.len(), 1 + 2 * CALLS, "every entity is there");
    let shared = entities
        .iter()
        .find(|e| e["name"] == "Shared")
        .expect("Shared");
    assert_eq!(
        shared["observations"].as_array().map(Vec::len),
        Some(2 * CALLS),
        "and every observation"
    );
    for who in ["first", "second"] {
        for n in 0..CALLS {
            let name = json!(format!("{who}-{n}"));
            assert!(
                entities.iter().any(|e| e["name"] == name),
                "{name} is missing"
            );
        }
    }
    // The file parses, line by line, and holds the same; no lock or temporary file is left.
    let file = data.join("memory.jsonl");
    assert_eq!(lines(&file).len(), 1 + 2 * CALLS);
    let mut left: Vec<String> = std::fs::read_dir(&data)
        .expect("the data directory")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    left.sort();
    assert_eq!(left, ["memory.jsonl"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_file_path_names_the_file_inside_the_grant() {
    for (setting, file) in [
        ("notes.jsonl", "notes.jsonl"),
        ("/memory/abs.jsonl", "abs.jsonl"),
    ] {
        let (dir, data, _scratch) = our_dir(&format!(
            "\n[env]\nset = {{ MEMORY_FILE_PATH = \"{setting}\" }}\n"
        ));
        let ours = ours(&dir).await;
        call(&ours, "create_entities", json!({ "entities": people() }))
            .await
            .graph();
        assert_eq!(lines(&data.join(file)).len(), 3, "{setting}");
        assert!(!data.join("memory.jsonl").exists(), "{setting}");
    }
    // A path outside the grant reaches nothing.
    for setting in ["/etc/passwd", "../outside.jsonl"] {
        let (dir, _data, scratch) = our_dir(&format!(
            "\n[env]\nset = {{ MEMORY_FILE_PATH = \"{setting}\" }}\n"
        ));
        std::fs::write(scratch.join("outside.jsonl"), "").expect("outside");
        let ours = ours(&dir).await;
        let (read, read_failed) = call_text(&ours, "read_graph", json!({}))
            .await
            .expect("a tool result");
        let write = call(&ours, "create_entities", json!({ "entities": people() })).await;
        assert!(read_failed && write.is_error, "{setting}: {read} {write:?}");
        assert!(
            write
                .text
                .contains("not a file inside the directory the plugin is granted"),
            "{setting}: {}",
            write.text
        );
        assert_eq!(
            std::fs::read_to_string(scratch.join("outside.jsonl")).expect("outside"),
            ""
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_out_of_the_grant_is_neither_read_nor_written() {
    let (dir, data, scratch) = our_dir("");
    let secret = scratch.join("secret.jsonl");
    let line = r#"{"type":"entity","name":"Secret","entityType":"t","observations":["hidden"]}"#;
    std::fs::write(&secret, line).expect("secret");
    std::os::unix::fs::symlink(&secret, data.join("memory.jsonl")).expect("symlink");
    let ours = ours(&dir).await;
    let read = call(&ours, "read_graph", json!({})).await;
    assert!(read.is_error, "{read:?}");
    assert!(!read.text.contains("hidden"), "{}", read.text);
    assert!(
        read.text
            .contains("cannot read the memory file /memory/memory.jsonl"),
        "{}",
        read.text
    );
    let write = call(&ours, "create_entities", json!({ "entities": people() })).await;
    assert!(write.is_error, "{write:?}");
    assert_eq!(std::fs::read_to_string(&secret).expect("secret"), line);
    assert!(
        data.join("memory.jsonl")
            .symlink_metadata()
            .expect("link")
            .is_symlink()
    );

    // The original, which has no sandbox, reads through the link.
    let Some(program) = program(MEMORY) else {
        return;
    };
    let theirs = theirs(&program, &data.join("memory.jsonl")).await;
    let read = call(&theirs, "read_graph", json!({})).await;
    assert_eq!(read.graph()["entities"][0]["name"], "Secret");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_or_huge_file_is_reported_and_kept() {
    let (dir, data, _scratch) = our_dir("");
    let file = data.join("memory.jsonl");
    let ours = ours(&dir).await;

    let damaged =
        "{\"type\":\"entity\",\"name\":\"A\",\"entityType\":\"t\",\"observations\":[]}\n{not json";
    std::fs::write(&file, damaged).expect("damaged");
    for tool in ["read_graph", "create_entities"] {
        let arguments = if tool == "read_graph" {
            json!({})
        } else {
            json!({ "entities": people() })
        };
        let answer = call(&ours, tool, arguments).await;
        assert!(answer.is_error, "{tool}: {answer:?}");
        assert!(
            answer.text.contains("is damaged: line 2 is not JSON"),
            "{tool}: {}",
            answer.text
        );
    }
    assert_eq!(std::fs::read_to_string(&file).expect("kept"), damaged);

    // Over the default limit of 8 MiB: refused before it is read.
    let huge = format!(
        "{{\"type\":\"entity\",\"name\":\"H\",\"entityType\":\"t\",\"observations\":[\"{}\"]}}",
        "x".repeat(9 << 20)
    );
    std::fs::write(&file, &huge).expect("huge");
    let answer = call(&ours, "search_nodes", json!({ "query": "x" })).await;
    assert!(answer.is_error, "{answer:?}");
    assert!(
        answer.text.contains("over the limit of 8388608 bytes"),
        "{}",
        answer.text
    );
    assert_eq!(
        std::fs::metadata(&file).expect("kept").len(),
        huge.len() as u64
    );

    // Just under the limit, in many small entities: a change still fits the default memory
    // (64 MiB) and time (10 s) limits.
    let mut small = String::new();
    for n in 0.. {
        let line = format!(
            "{{\"type\":\"entity\",\"name\":\"e{n}\",\"entityType\":\"t\",\"observations\":[]}}\n"
        );
        if small.len() + line.len() > (8 << 20) - 200 {
            break;
        }
        small.push_str(&line);
    }
    std::fs::write(&file, &small).expect("small entities");
    let one = json!({ "entities": [{"name": "one more", "entityType": "t", "observations": []}] });
    let answer = call(&ours, "create_entities", one).await;
    assert_eq!(answer.graph()["entities"][0]["name"], "one more");
    assert_eq!(lines(&file).len(), small.lines().count() + 1);

    // Under the file's limit but over the host's output limit (1 MiB): the whole graph cannot
    // be returned, a search for part of it can.
    let large: Vec<String> = (0..1500)
        .map(|n| format!("{{\"type\":\"entity\",\"name\":\"E{n}\",\"entityType\":\"t\",\"observations\":[\"{}\"]}}", "y".repeat(1000)))
        .collect();
    std::fs::write(&file, large.join("\n")).expect("large");
    let answer = call(&ours, "read_graph", json!({})).await;
    assert!(answer.is_error, "{answer:?}");
    assert!(
        answer.text.contains("over the output limit"),
        "{}",
        answer.text
    );
    let answer = call(&ours, "open_nodes", json!({ "names": ["E7"] })).await;
    assert_eq!(answer.graph()["entities"][0]["name"], "E7");

    // The original refuses the damaged file too, and keeps it.
    let Some(program) = program(MEMORY) else {
        return;
    };
    std::fs::write(&file, damaged).expect("damaged");
    let theirs = theirs(&program, &file).await;
    let answer = call(&theirs, "create_entities", json!({ "entities": people() })).await;
    assert!(answer.is_error, "{answer:?}");
    assert_eq!(std::fs::read_to_string(&file).expect("kept"), damaged);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_stops_growing_at_its_limit() {
    let (dir, data, _scratch) = our_dir("\n[env]\nset = { MEMORY_FILE_MAX_BYTES = \"4500\" }\n");
    let file = data.join("memory.jsonl");
    let session = ours(&dir).await;
    let big = |n: usize| json!({ "entities": [{"name": format!("E{n}"), "entityType": "t", "observations": ["x".repeat(1000)]}] });
    let mut refused = None;
    for n in 0..10 {
        let answer = call(&session, "create_entities", big(n)).await;
        if answer.is_error {
            refused = Some((n, answer.text));
            break;
        }
    }
    let (n, text) = refused.expect("the limit was never reached");
    assert_eq!(
        n, 4,
        "four entities of ~1070 bytes fit in 4500 bytes, a fifth does not"
    );
    assert!(text.contains("over its limit of 4500 bytes"), "{text}");
    assert_eq!(
        lines(&file).len(),
        4,
        "the file holds what fitted, and parses"
    );
    assert!(std::fs::metadata(&file).expect("file").len() <= 4500);

    // One call's input is bounded by the host before the plugin runs (1 MiB by default).
    let (dir, data, _scratch) = our_dir("");
    let ours = ours(&dir).await;
    let answer = call(&ours, "create_entities", json!({ "entities": [{"name": "H", "entityType": "t", "observations": ["x".repeat(2 << 20)]}] })).await;
    assert!(answer.is_error, "{answer:?}");
    assert!(!data.join("memory.jsonl").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_is_waited_for_and_a_dead_one_taken_over() {
    let (dir, data, _scratch) = our_dir("");
    let lock = data.join("memory.jsonl.lock");
    let ours = ours(&dir).await;
    let entity =
        |name: &str| json!({ "entities": [{"name": name, "entityType": "t", "observations": []}] });

    // A lock another session holds: the change waits for it, then gives up, saying so.
    std::fs::write(&lock, "another session").expect("lock");
    let answer = call(&ours, "create_entities", entity("A")).await;
    assert!(answer.is_error, "{answer:?}");
    assert!(
        answer.text.contains("is locked by another session"),
        "{}",
        answer.text
    );
    assert!(
        answer.text.contains("/memory/memory.jsonl.lock"),
        "{}",
        answer.text
    );
    assert_eq!(
        std::fs::read_to_string(&lock).expect("the lock is kept"),
        "another session"
    );
    assert!(!data.join("memory.jsonl").exists());

    // A lock left by a change cut short (older than 30 s): taken over.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(&lock)
        .and_then(|file| file.set_modified(old))
        .expect("age the lock");
    call(&ours, "create_entities", entity("B")).await.graph();
    assert!(!lock.exists());
    assert_eq!(lines(&data.join("memory.jsonl")).len(), 1);
}
