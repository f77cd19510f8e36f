//! The host memory a plugin's compiled schemas may take: every regular expression of its
//! schemas charged, as jsonschema will build it, before any schema is compiled.

use std::collections::HashSet;

use serde_json::Value;

/// What one compiled regular expression takes beyond what `regex-automata` reports for its
/// automata and its first search cache: jsonschema's validator around it, its `Arc`s, the
/// pattern text (original and translated), its entries in the pattern caches, the cache pool.
/// Measured with `tests::measure_the_memory_of_compiled_patterns`: 2,263 patterns like
/// `^\S+123.*$` took 14,563 bytes each, of which `regex-automata` reported 5,261 (and 4,198
/// for a search cache, not yet made); 5,045 bytes more each, rounded up.
pub(super) const REGEX_OVERHEAD_BYTES: usize = 6 << 10;

/// The host memory one plugin's compiled schemas may take, charged before each schema is
/// compiled, across all its tools' input and output schemas.
///
/// jsonschema compiles every `pattern` and every `patternProperties` key into a regular
/// expression, and keeps it for as long as the plugin is loaded: a 60 KB schema of 2,000
/// patterns took 64 MiB of host memory, which the instance memory limit never sees. The budget
/// walks the schema first, and builds each regular expression it has not charged yet exactly
/// as jsonschema will (the same translation from ECMA 262, the same `regex-automata` engine
/// and options) with its automata limited to what is left of the budget, so that an
/// over-large one fails at once; it then charges what that build reports as its memory, plus
/// its first search cache and [`REGEX_OVERHEAD_BYTES`]. A pattern the plugin's schemas repeat
/// is compiled once for all of them (jsonschema's pattern cache, shared by the plugin's
/// builds) and charged once.
pub(crate) struct SchemaBudget {
    limit: usize,
    spent: usize,
    /// The regular expressions charged so far (their text in the schema).
    charged: HashSet<String>,
    /// jsonschema's compiled patterns, shared by every schema of the plugin.
    pub(super) compiled: jsonschema::PatternCache,
}

/// Largest compiled automaton of one `pattern` (jsonschema's `size_limit`, which
/// `regex-automata` applies to each of its NFAs).
pub(crate) const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// The lazy DFA's cache capacity the `regex` crate gives each regular expression by default
/// (jsonschema does not change it).
const LAZY_DFA_CAPACITY: usize = 2 << 20;

impl SchemaBudget {
    /// A budget of `limit` bytes (the plugin's `Limits::schema_memory_bytes`).
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            spent: 0,
            charged: HashSet::new(),
            compiled: jsonschema::PatternCache::new(),
        }
    }

    /// Bytes charged so far.
    #[cfg(test)]
    pub(crate) fn spent(&self) -> usize {
        self.spent
    }

    /// Charges what compiling `schema` will add (the schema of `what`, e.g. `tool "t"'s input
    /// schema`), or refuses it, without compiling it, when that is more than is left.
    pub(super) fn charge(&mut self, schema: &Value, what: &str) -> Result<(), String> {
        let mut found = Vec::new();
        regexes(schema, &mut found);
        for pattern in found {
            if self.charged.contains(pattern) {
                continue;
            }
            let room = self.limit.saturating_sub(self.spent);
            let cost = regex_cost(pattern, room)
                .filter(|&cost| cost <= room)
                .ok_or_else(|| {
                    format!(
                        "the regular expressions (`pattern`, `patternProperties`) of {what}                          take the plugin's compiled schemas over their limit of {} MiB of host                          memory ({} distinct ones, {:.1} MiB, were charged before it); use                          fewer or simpler patterns, or, if you trust the plugin, raise                          `schema_memory_mib` under [limits] in its policy file",
                        self.limit >> 20,
                        self.charged.len(),
                        self.spent as f64 / f64::from(1 << 20),
                    )
                })?;
            self.spent += cost;
            self.charged.insert(pattern.to_owned());
        }
        Ok(())
    }
}

/// Every string of `schema` that jsonschema may compile as a regular expression: each
/// `pattern` string and each key of a `patternProperties` object, wherever they are (also
/// where they are data, such as in a `const`: charging those too is the safe side, and a
/// property named `const` must not hide the schema under it).
pub(super) fn regexes<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
    match value {
        Value::Object(members) => {
            for (key, value) in members {
                match (key.as_str(), value) {
                    ("pattern", Value::String(pattern)) => found.push(pattern),
                    ("patternProperties", Value::Object(patterns)) => {
                        found.extend(patterns.keys().map(String::as_str));
                    }
                    _ => {}
                }
                regexes(value, found);
            }
        }
        Value::Array(items) => {
            for item in items {
                regexes(item, found);
            }
        }
        _ => {}
    }
}

/// The host memory `pattern` takes once jsonschema has compiled it and searched with it once,
/// built with each automaton limited to `room` bytes: `None` if it does not fit. A text that
/// is no regular expression costs [`REGEX_OVERHEAD_BYTES`] (jsonschema refuses it where it is a
/// pattern).
pub(super) fn regex_cost(pattern: &str, room: usize) -> Option<usize> {
    use jsonschema_regex::Search;
    use regex_automata::meta;
    // As jsonschema compiles it: translated from ECMA 262 to Rust's syntax, then counted
    // without an engine (a repeated class) or compiled by the `regex` crate.
    let Ok(translated) = jsonschema_regex::to_rust_regex(pattern) else {
        return Some(REGEX_OVERHEAD_BYTES);
    };
    let form = jsonschema_regex::search_form(pattern, &translated);
    let compiled = match &form {
        Some(Search::RepeatedClass(_)) => return Some(REGEX_OVERHEAD_BYTES),
        Some(Search::Collapsed(text)) => text.as_str(),
        None => translated.as_ref(),
    };
    // `regex::RegexBuilder`'s configuration, with jsonschema's size limit or less.
    let config = meta::Config::new()
        .nfa_size_limit(Some(room.min(PATTERN_SIZE_LIMIT)))
        .hybrid_cache_capacity(LAZY_DFA_CAPACITY);
    match meta::Builder::new().configure(config).build(compiled) {
        Ok(regex) => Some(
            regex
                .memory_usage()
                .saturating_add(regex.create_cache().memory_usage())
                .saturating_add(REGEX_OVERHEAD_BYTES),
        ),
        Err(error) if error.size_limit().is_some() => None,
        Err(_) => Some(REGEX_OVERHEAD_BYTES),
    }
}
