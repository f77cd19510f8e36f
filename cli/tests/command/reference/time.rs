//! `mcp-server-time` beside our `time` plugin: the same listing, the same answers and the
//! same errors.
//!
//! Normalisations, each named where it is applied:
//! - **the clock**: the current time is read by each server when it answers, so the original
//!   is asked before and after ours, and ours must lie between its two answers (to the
//!   second), with one of their offsets, days and DST flags; `convert_time` (today's date in
//!   the source zone) must equal the original's answer whenever its two answers agree.
//! - **JSON layout**: the original writes its result's text as JSON indented by two spaces,
//!   ours as compact JSON: the texts are compared as parsed JSON, and the structured values
//!   as they are.
//! - **error framing**: the original says `Error executing tool NAME: …`, our host
//!   `Execution failed: …`: the message after it must be equal.

use llm_worker_tests::reference::{TIME, TIME_POLICY, time_original};
use serde_json::{Value, json};

use super::{Answer, Session, call, call_text, ours, plugin_dir, program, shapes};

/// Both servers, the original told that the local timezone is UTC (`TIME_LOCAL`), ours with
/// the policy it ships with; `None` when the original cannot be installed here (the test is skipped).
async fn both() -> Option<(Session, Session, llm_worker_tests::ScratchDir)> {
    let program = program(TIME)?;
    let (dir, scratch) = plugin_dir("time", &[("time.policy.toml", TIME_POLICY)]);
    let theirs = time_original(&program, &scratch).await;
    let ours = ours(&dir).await;
    Some((theirs, ours, scratch))
}

impl Answer {
    /// The result, checked to be one: its text parsed (the **JSON layout** normalisation),
    /// which must be the structured value.
    fn value(&self) -> Value {
        assert!(!self.is_error, "an error: {}", self.text);
        let parsed: Value = serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text));
        assert_eq!(
            self.structured.as_ref(),
            Some(&parsed),
            "text and structure"
        );
        parsed
    }

    /// The error's message without its framing (the **error framing** normalisation).
    fn error(&self, tool: &str) -> String {
        assert!(self.is_error, "not an error: {}", self.text);
        let theirs = format!("Error executing tool {tool}: ");
        self.text
            .strip_prefix(&theirs)
            .or_else(|| self.text.strip_prefix("Execution failed: "))
            .unwrap_or_else(|| panic!("an error without a known framing: {}", self.text))
            .to_owned()
    }
}

/// Seconds since the epoch of `YYYY-MM-DDTHH:MM:SS±HH:MM`, and its offset.
fn instant(datetime: &str) -> (i64, &str) {
    let number = |range: std::ops::Range<usize>| -> i64 {
        datetime
            .get(range)
            .and_then(|digits| digits.parse().ok())
            .unwrap_or_else(|| panic!("not an ISO 8601 time: {datetime}"))
    };
    assert_eq!(datetime.len(), 25, "{datetime}");
    let (year, month, day) = (number(0..4), number(5..7), number(8..10));
    let seconds = number(11..13) * 3600 + number(14..16) * 60 + number(17..19);
    let sign = if &datetime[19..20] == "-" { -1 } else { 1 };
    let offset = sign * (number(20..22) * 3600 + number(23..25) * 60);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (days * 86_400 + seconds - offset, &datetime[19..])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_are_listed_alike() {
    let Some((theirs, ours, _scratch)) = both().await else {
        return;
    };
    assert_eq!(shapes(&ours).await, shapes(&theirs).await);
    let mut their_tools = theirs.list_all_tools().await.expect("tools/list");
    let mut our_tools = ours.list_all_tools().await.expect("tools/list");
    their_tools.sort_by(|a, b| a.name.cmp(&b.name));
    our_tools.sort_by(|a, b| a.name.cmp(&b.name));
    for (their, our) in their_tools.iter().zip(&our_tools) {
        assert_eq!(our.description, their.description, "{}", our.name);
        // Each argument's description, the local timezone named alike.
        for (name, property) in their.input_schema["properties"]
            .as_object()
            .expect("properties")
        {
            assert_eq!(
                our.input_schema["properties"][name]["description"], property["description"],
                "{}.{name}",
                our.name
            );
        }
        let (their_hints, our_hints) = (
            their.annotations.as_ref().expect("hints"),
            our.annotations.as_ref().expect("hints"),
        );
        assert_eq!(our_hints.read_only_hint, their_hints.read_only_hint);
        assert_eq!(our_hints.open_world_hint, their_hints.open_world_hint);
        assert_eq!(our_hints.idempotent_hint, their_hints.idempotent_hint);
        assert_eq!(our_hints.destructive_hint, their_hints.destructive_hint);
        // Both describe their structured results, with the same fields.
        let fields = |schema: &Option<std::sync::Arc<serde_json::Map<String, Value>>>| {
            let schema = schema.as_ref().expect("an output schema");
            let mut names: Vec<String> = schema["properties"]
                .as_object()
                .expect("properties")
                .keys()
                .cloned()
                .collect();
            names.sort();
            names
        };
        assert_eq!(fields(&our.output_schema), fields(&their.output_schema));
    }
    let description = our_tools[1].input_schema["properties"]["timezone"]["description"]
        .as_str()
        .expect("described");
    assert!(description.contains("Use 'UTC'"), "{description}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_current_time_is_the_same_moment_in_the_same_zone() {
    let Some((theirs, ours, _scratch)) = both().await else {
        return;
    };
    for zone in [
        "Europe/Warsaw",
        "America/New_York",
        "Asia/Kathmandu",
        "Australia/Lord_Howe",
        "UTC",
    ] {
        let arguments = json!({ "timezone": zone });
        // The clock: the original before and after ours.
        let before = call(&theirs, "get_current_time", arguments.clone())
            .await
            .value();
        let our = call(&ours, "get_current_time", arguments.clone())
            .await
            .value();
        let after = call(&theirs, "get_current_time", arguments).await.value();
        println!("{zone}: theirs {before} / {after}, ours {our}");
        assert_eq!(our["timezone"], zone);
        let moment = |value: &Value| -> (i64, String) {
            let (at, offset) = instant(value["datetime"].as_str().expect("datetime"));
            (at, offset.to_owned())
        };
        let ((from, from_offset), (at, offset), (to, to_offset)) =
            (moment(&before), moment(&our), moment(&after));
        assert!(from <= at && at <= to, "{zone}: {from} <= {at} <= {to}");
        assert!(offset == from_offset || offset == to_offset, "{zone}");
        for field in ["day_of_week", "is_dst"] {
            assert!(
                our[field] == before[field] || our[field] == after[field],
                "{zone}: {field}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversions_are_equal() {
    let Some((theirs, ours, _scratch)) = both().await else {
        return;
    };
    for (source, time, target) in [
        ("Asia/Kathmandu", "16:30", "America/New_York"),
        ("America/Chicago", "12:00", "Asia/Kolkata"),
        ("UTC", "9:05", "Europe/London"),
        ("Europe/Warsaw", "23:59", "Pacific/Kiritimati"),
        ("Pacific/Chatham", "00:00", "Europe/Lisbon"),
        ("America/St_Johns", "07:15", "Australia/Adelaide"),
    ] {
        let arguments =
            json!({ "source_timezone": source, "time": time, "target_timezone": target });
        let before = call(&theirs, "convert_time", arguments.clone())
            .await
            .value();
        let our = call(&ours, "convert_time", arguments.clone()).await.value();
        let after = call(&theirs, "convert_time", arguments).await.value();
        // The clock: today's date in the source zone, which changes only at its midnight.
        assert!(
            our == before || our == after,
            "{source} {time} → {target}: ours {our}, theirs {before}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_say_the_same() {
    let Some((theirs, ours, _scratch)) = both().await else {
        return;
    };
    let cases = [
        (
            "get_current_time",
            json!({ "timezone": "Mars/Olympus_Mons" }),
        ),
        // The exact key only: a case-insensitive file system must not make it valid.
        ("get_current_time", json!({ "timezone": "europe/warsaw" })),
        ("get_current_time", json!({ "timezone": "" })),
        (
            "convert_time",
            json!({ "source_timezone": "UTC", "time": "25:30", "target_timezone": "Asia/Tokyo" }),
        ),
        (
            "convert_time",
            json!({ "source_timezone": "UTC", "time": "12:00", "target_timezone": "Nowhere" }),
        ),
        (
            "convert_time",
            json!({ "source_timezone": "", "time": "12:00", "target_timezone": "" }),
        ),
        (
            "convert_time",
            json!({ "source_timezone": "UTC", "time": "12:00", "target_timezone": "" }),
        ),
    ];
    for (tool, arguments) in cases {
        let their = call(&theirs, tool, arguments.clone()).await;
        let our = call(&ours, tool, arguments.clone()).await;
        println!(
            "{tool} {arguments}: theirs {:?}, ours {:?}",
            their.text, our.text
        );
        assert_eq!(our.error(tool), their.error(tool), "{tool} {arguments}");
    }

    // A missing argument is an error result in both, worded by each SDK.
    let their = call(&theirs, "get_current_time", json!({})).await;
    let our = call(&ours, "get_current_time", json!({})).await;
    println!("no argument: theirs {:?}, ours {:?}", their.text, our.text);
    assert!(their.is_error && our.is_error);
    assert!(our.text.contains("timezone"), "{}", our.text);

    // An unknown tool is a protocol error in both.
    for session in [&theirs, &ours] {
        let unknown = call_text(session, "get_time", json!({})).await;
        assert!(unknown.is_err(), "{unknown:?}");
    }
}
