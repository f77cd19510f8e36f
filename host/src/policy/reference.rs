//! `docs/policy.md`, the policy file's reference, held to the parser: every key the parser
//! takes has its row there and every row is a key the parser takes (the parser itself is asked
//! which keys each table has), the defaults and ranges the rows give are the code's, and the
//! complete example uses every key and is a policy the parser accepts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::*;

const REFERENCE: &str = include_str!("../../../docs/policy.md");

/// The tables of a policy file, as key paths: `[]` is an element of an array of tables, `NAME`
/// any name (a tool's). Every other key the parser takes holds a value, and is a row of the
/// reference.
const TABLES: &[&str] = &[
    "",
    "limits",
    "env",
    "dirs[]",
    "http",
    "http.secrets[]",
    "tools.NAME",
    "tools.NAME.http",
    "resources",
    "resources.http",
    "prompts",
    "prompts.http",
    "completion",
    "completion.http",
    "client",
];

/// The key put where the parser is asked what it expects.
const PROBE: &str = "probe_of_the_reference_test";

fn join(table: &str, key: &str) -> String {
    match table {
        "" => key.to_owned(),
        _ => format!("{table}.{key}"),
    }
}

/// A policy file with `{ PROBE = 1 }` at `path` (a key path as in [`TABLES`]).
fn probe_file(path: &str) -> String {
    /// `key = value`, where the value holds the rest of the path.
    fn entry(segment: &str, rest: &[&str]) -> String {
        let value = match rest.split_first() {
            None => format!("{{ {PROBE} = 1 }}"),
            Some((next, rest)) => format!("{{ {} }}", entry(next, rest)),
        };
        match segment.strip_suffix("[]") {
            Some(array) => format!("{array} = [{value}]"),
            None => format!("{segment} = {value}"),
        }
    }
    let segments: Vec<&str> = path.split('.').filter(|s| !s.is_empty()).collect();
    match segments.split_first() {
        None => format!("{PROBE} = 1\n"),
        Some((first, rest)) => format!("{}\n", entry(first, rest)),
    }
}

/// The parser's message for `text`, which must be refused.
fn refusal(text: &str) -> String {
    match SandboxPolicy::parse(text, Path::new("/probe.policy.toml"), &Limits::default()) {
        Ok(_) => panic!("the parser accepted the probe {text:?}"),
        Err(error) => error.to_string(),
    }
}

/// The keys of the table at `table`, as the parser lists them refusing an unknown one
/// (``unknown field `x`, expected one of `a`, `b` ``: serde's `deny_unknown_fields`).
fn fields(table: &str) -> Vec<String> {
    let message = refusal(&probe_file(table));
    let unknown = format!("unknown field `{PROBE}`, ");
    let Some(start) = message.find(&unknown) else {
        panic!(
            "the parser has no table `{table}` taking only known keys (TABLES in {}): {message}",
            file!()
        )
    };
    let expected = message[start + unknown.len()..]
        .lines()
        .next()
        .unwrap_or_default();
    if expected == "there are no fields" {
        return Vec::new();
    }
    let fields: Vec<String> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(!fields.is_empty(), "no fields read from {expected:?}");
    fields
}

/// Whether the key `path` is a table of [`TABLES`] (itself, an array of them, or a map of them).
fn is_table(path: &str) -> bool {
    [path.to_owned(), format!("{path}[]"), format!("{path}.NAME")]
        .iter()
        .any(|table| TABLES.contains(&table.as_str()))
}

/// Every key of a policy file that holds a value, as the parser knows them.
fn parser_keys() -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for table in TABLES {
        for field in fields(table) {
            let key = join(table, &field);
            if is_table(&key) {
                continue;
            }
            // A value, not a table of its own that TABLES forgot.
            let message = refusal(&probe_file(&key));
            assert!(
                !message.contains("unknown field") && !message.contains("missing field"),
                "`{key}` is a table: add it to TABLES in {}: {message}",
                file!()
            );
            keys.insert(key);
        }
    }
    keys
}

/// The reference's rows: the first cell (a key in backticks) and the cells after it.
fn rows() -> BTreeMap<String, Vec<String>> {
    let mut rows = BTreeMap::new();
    for line in REFERENCE.lines() {
        let Some(line) = line.trim().strip_prefix('|') else {
            continue;
        };
        let cells: Vec<String> = line
            .trim_end_matches('|')
            .split('|')
            .map(|cell| cell.trim().to_owned())
            .collect();
        let Some(key) = cells[0]
            .strip_prefix('`')
            .and_then(|key| key.strip_suffix('`'))
        else {
            continue;
        };
        let previous = rows.insert(key.to_owned(), cells[1..].to_vec());
        assert!(
            previous.is_none(),
            "docs/policy.md has two rows for `{key}`"
        );
    }
    rows
}

#[test]
fn every_key_of_the_parser_has_its_row_in_docs_policy_md_and_no_other() {
    let keys = parser_keys();
    let documented: BTreeSet<String> = rows().into_keys().collect();
    let missing: Vec<&String> = keys.difference(&documented).collect();
    let unknown: Vec<&String> = documented.difference(&keys).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/policy.md is not the parser's: keys without a row {missing:?}; rows that are no \
         key {unknown:?} (the parser's keys: {keys:?})"
    );
}

/// The cells of the row `key`: type, default, range, what it does.
fn row(rows: &BTreeMap<String, Vec<String>>, key: &str) -> (String, String, String) {
    let cells = rows
        .get(key)
        .unwrap_or_else(|| panic!("docs/policy.md has no row `{key}`"));
    assert_eq!(
        cells.len(),
        4,
        "row `{key}`: key, type, default, range, what"
    );
    (cells[0].clone(), cells[1].clone(), cells[2].clone())
}

/// The numbers written in `cell` (digits only: the reference writes them without separators).
fn numbers(cell: &str) -> Vec<u64> {
    cell.split(|c: char| !c.is_ascii_digit())
        .filter_map(|digits| digits.parse().ok())
        .collect()
}

#[test]
fn the_defaults_and_ranges_of_docs_policy_md_are_the_codes() {
    let rows = rows();
    let limits = Limits::default();
    let client = ClientPolicy::default();
    let ranged =
        |range: &std::ops::RangeInclusive<u64>| format!("{}–{}", range.start(), range.end());
    let numeric: [(&str, u64, Option<String>); 12] = [
        (
            "limits.memory_mib",
            limits.memory_bytes as u64 >> 20,
            Some(ranged(&Limits::MEMORY_MIB)),
        ),
        (
            "limits.schema_memory_mib",
            limits.schema_memory_bytes as u64 >> 20,
            Some(ranged(&Limits::SCHEMA_MEMORY_MIB)),
        ),
        (
            "limits.timeout_ms",
            limits.call_timeout.as_millis() as u64,
            Some(ranged(&Limits::TIMEOUT_MS)),
        ),
        (
            "limits.max_input_bytes",
            limits.max_input_bytes as u64,
            None,
        ),
        (
            "limits.max_output_bytes",
            limits.max_output_bytes as u64,
            None,
        ),
        (
            "limits.max_consecutive_failures",
            u64::from(limits.max_consecutive_failures),
            Some(format!("1–{}", u32::MAX)),
        ),
        (
            "limits.task_timeout_ms",
            u64::try_from(
                limits
                    .task_timeout
                    .unwrap_or(limits.call_timeout)
                    .as_millis(),
            )
            .unwrap_or(u64::MAX),
            Some(ranged(&Limits::TIMEOUT_MS)),
        ),
        (
            "limits.max_concurrent_calls",
            u64::from(limits.max_concurrent_calls),
            Some(format!("1–{}", Limits::CONCURRENT_CALLS.end())),
        ),
        (
            "client.max_questions",
            u64::from(client.max_questions),
            Some(ranged(&ClientPolicy::MAX_QUESTIONS)),
        ),
        (
            "client.max_question_bytes",
            client.max_question_bytes as u64,
            Some(ranged(&ClientPolicy::MAX_QUESTION_BYTES)),
        ),
        (
            "client.answer_timeout_ms",
            client.answer_timeout.as_millis() as u64,
            Some(ranged(&ClientPolicy::ANSWER_TIMEOUT_MS)),
        ),
        ("limits.fuel", Limits::FUEL.start, None),
    ];
    for (key, default, range) in numeric {
        let (_, default_cell, range_cell) = row(&rows, key);
        if key == "limits.fuel" {
            // No default (no metering); at least `Limits::FUEL.start`.
            assert!(
                default_cell.contains("none"),
                "`{key}` has no default: {default_cell}"
            );
            assert!(
                numbers(&range_cell).first() == Some(&default),
                "`{key}`'s range starts at {default}: {range_cell}"
            );
            continue;
        }
        assert!(
            numbers(&default_cell).contains(&default),
            "`{key}`'s default is {default}: the row says {default_cell:?}"
        );
        if let Some(range) = range {
            assert!(
                range_cell.contains(&range),
                "`{key}`'s range is {range}: the row says {range_cell:?}"
            );
        }
    }
    for (key, default) in [
        ("client.elicitation", client.elicitation),
        ("client.sampling", client.sampling),
        ("client.roots", client.roots),
    ] {
        let (kind, default_cell, _) = row(&rows, key);
        assert_eq!(kind, "boolean", "`{key}`");
        assert!(
            default_cell.contains(&format!("`{default}`")),
            "`{key}`'s default is {default}: the row says {default_cell:?}"
        );
    }
}

/// The reference's complete example: the first `toml` block after its heading.
fn complete_example() -> &'static str {
    let heading = "## A complete example";
    let after = REFERENCE
        .split_once(heading)
        .unwrap_or_else(|| panic!("docs/policy.md has no heading {heading:?}"))
        .1;
    after
        .split_once("```toml\n")
        .and_then(|(_, block)| block.split_once("\n```"))
        .map(|(block, _)| block)
        .unwrap_or_else(|| panic!("no ```toml block after {heading:?} in docs/policy.md"))
}

/// The keys that hold values in `table` at `path`, walked as [`TABLES`] says.
fn keys_used(table: &toml::Table, path: &str, keys: &mut BTreeSet<String>) {
    for (key, value) in table {
        let key = join(path, key);
        let tables: Vec<(&toml::Table, String)> = if TABLES.contains(&key.as_str()) {
            value
                .as_table()
                .map(|t| (t, key.clone()))
                .into_iter()
                .collect()
        } else if TABLES.contains(&format!("{key}[]").as_str()) {
            let each = value.as_array().map(Vec::as_slice).unwrap_or_default();
            let path = format!("{key}[]");
            each.iter()
                .filter_map(toml::Value::as_table)
                .map(|t| (t, path.clone()))
                .collect()
        } else if TABLES.contains(&format!("{key}.NAME").as_str()) {
            let path = format!("{key}.NAME");
            value
                .as_table()
                .into_iter()
                .flat_map(|named| named.values())
                .filter_map(toml::Value::as_table)
                .map(|t| (t, path.clone()))
                .collect()
        } else {
            keys.insert(key);
            continue;
        };
        for (table, path) in tables {
            keys_used(table, &path, keys);
        }
    }
}

#[test]
fn the_complete_example_of_docs_policy_md_uses_every_key_and_is_accepted() {
    let example = complete_example();
    let mut table: toml::Table = toml::from_str(example)
        .unwrap_or_else(|e| panic!("the example of docs/policy.md is not TOML: {e}"));
    let mut used = BTreeSet::new();
    keys_used(&table, "", &mut used);
    let unused: Vec<String> = parser_keys().difference(&used).cloned().collect();
    assert!(
        unused.is_empty(),
        "the complete example of docs/policy.md does not use {unused:?}"
    );
    // What the parser needs from the machine it runs on (variables set, directories there)
    // is left out; the rest must be accepted as written.
    if let Some(env) = table.get_mut("env").and_then(toml::Value::as_table_mut) {
        env.remove("inherit");
    }
    table.remove("dirs");
    for secret in table
        .get_mut("http")
        .and_then(|http| http.get_mut("secrets"))
        .and_then(toml::Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(secret) = secret.as_table_mut() {
            secret.insert("value".into(), "a value".into());
        }
    }
    if let Err(error) = SandboxPolicy::parse(
        &table.to_string(),
        Path::new("/plugins/weather.policy.toml"),
        &Limits::default(),
    ) {
        panic!("the complete example of docs/policy.md is refused: {error}");
    }
}
