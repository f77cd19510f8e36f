//! A form's schema as MCP elicitation allows it — a flat object of string, number, integer,
//! boolean, single- and multi-select enum fields, some required — and whether an answer fits
//! it. The host checks every accepted answer against its form, whoever answered (an MCP
//! client, a retry's answers, an embedder's handler), before the plugin sees it.
//!
//! A keyword that constrains values and that MCP's form schema cannot carry (`pattern`,
//! `const`, `allOf`, `$ref` …) is refused when the form is asked, as is a text a client shows
//! that breaks the rules of a message ([`check_shown`](super::message)): a plugin must not count
//! on a rule no one enforces. Annotations (`title`, `description`, `default` …) and keywords
//! that do not constrain (`format` of a number) pass and are not checked.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::message::check_shown;

/// A form: its fields by name, and which must be given.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Form {
    fields: BTreeMap<String, Field>,
    required: Vec<String>,
}

/// One field of a form.
#[derive(Debug, Clone, PartialEq)]
enum Field {
    /// A string, of a length, of a format, or one of a few (a single-select enum).
    Text {
        min_length: Option<u64>,
        max_length: Option<u64>,
        format: Option<Format>,
        choices: Option<Vec<String>>,
    },
    /// A number (an integer, if `integer`), within bounds.
    Number {
        integer: bool,
        minimum: Option<f64>,
        maximum: Option<f64>,
    },
    Boolean,
    /// Some of a few strings (a multi-select enum), each once.
    Choices {
        choices: Vec<String>,
        min_items: Option<u64>,
        max_items: Option<u64>,
    },
}

/// The string formats MCP allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Email,
    Uri,
    Date,
    DateTime,
}

/// Keywords that would constrain a field's or the form's values but that MCP's form schema
/// does not carry, so no client enforces them.
const UNCARRIED: [&str; 20] = [
    "pattern",
    "const",
    "multipleOf",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "$ref",
    "$dynamicRef",
    "dependentRequired",
    "dependentSchemas",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "contains",
    "prefixItems",
];

impl Form {
    /// The form of `schema`, or what about it MCP's form schema does not allow.
    pub(crate) fn parse(schema: &Value) -> Result<Self, String> {
        let Value::Object(root) = schema else {
            return Err("the form's schema is not a JSON object".into());
        };
        strings_shown(schema)?;
        if root.get("type").and_then(Value::as_str) != Some("object") {
            return Err("the form's schema is not of `\"type\": \"object\"`".into());
        }
        uncarried(root, "the form")?;
        for keyword in ["anyOf", "oneOf", "items", "enum"] {
            if root.contains_key(keyword) {
                return Err(format!(
                    "the form's schema has `{keyword}`; a form is a flat object of fields"
                ));
            }
        }
        if root
            .get("additionalProperties")
            .is_some_and(|extra| extra != &Value::Bool(false))
        {
            return Err(
                "the form allows fields it does not name (`additionalProperties`); \
                        a form's answer has only its fields"
                    .into(),
            );
        }
        let Some(Value::Object(properties)) = root.get("properties") else {
            return Err("the form's schema has no `properties` object".into());
        };
        let mut fields = BTreeMap::new();
        for (name, field) in properties {
            let field =
                Field::parse(field).map_err(|problem| format!("field '{name}' {problem}"))?;
            fields.insert(name.clone(), field);
        }
        let required = match root.get("required") {
            None => Vec::new(),
            Some(Value::Array(names)) => {
                let mut required = Vec::with_capacity(names.len());
                for name in names {
                    let Some(name) = name.as_str() else {
                        return Err(
                            "the form's `required` holds a name that is not a string".into()
                        );
                    };
                    if !fields.contains_key(name) {
                        return Err(format!(
                            "the form requires field '{name}', which it does not have"
                        ));
                    }
                    required.push(name.to_owned());
                }
                required
            }
            Some(_) => return Err("the form's `required` is not a list of field names".into()),
        };
        Ok(Self { fields, required })
    }

    /// How many entries the form lists (fields, choices, required names), each charged
    /// against the question's size limit.
    pub(crate) fn items(&self) -> usize {
        let choices = |field: &Field| match field {
            Field::Text {
                choices: Some(choices),
                ..
            }
            | Field::Choices { choices, .. } => choices.len(),
            _ => 0,
        };
        self.fields
            .values()
            .map(|field| 1usize.saturating_add(choices(field)))
            .fold(self.required.len(), usize::saturating_add)
    }

    /// Whether `content`, an accepted answer, fits the form: only its fields, each of its
    /// type and within its bounds, and every required one given. The first misfit, if not.
    pub(crate) fn check(&self, content: &Map<String, Value>) -> Result<(), String> {
        for (name, value) in content {
            let Some(field) = self.fields.get(name) else {
                return Err(format!(
                    "it has a field '{name}', which the form does not ask for"
                ));
            };
            field
                .check(value)
                .map_err(|problem| format!("its field '{name}' {problem}"))?;
        }
        match self
            .required
            .iter()
            .find(|name| !content.contains_key(*name))
        {
            Some(missing) => Err(format!("it leaves out the required field '{missing}'")),
            None => Ok(()),
        }
    }
}

impl Field {
    fn parse(schema: &Value) -> Result<Self, String> {
        let Value::Object(field) = schema else {
            return Err("is not a schema object".into());
        };
        uncarried(field, "the field")?;
        let kind = field.get("type").and_then(Value::as_str).unwrap_or("");
        let only_for = |keywords: &[&str], kinds: &str| match keywords
            .iter()
            .find(|keyword| field.contains_key(**keyword))
        {
            Some(keyword) => Err(format!("has `{keyword}`, which only {kinds} may have here")),
            None => Ok(()),
        };
        match kind {
            "string" => {
                only_for(
                    &["items", "anyOf", "minItems", "maxItems"],
                    "a multi-select field",
                )?;
                let format = match field.get("format") {
                    None => None,
                    Some(Value::String(format)) => Some(match format.as_str() {
                        "email" => Format::Email,
                        "uri" => Format::Uri,
                        "date" => Format::Date,
                        "date-time" => Format::DateTime,
                        other => {
                            return Err(format!(
                                "has format '{other}'; MCP allows email, uri, date and date-time"
                            ));
                        }
                    }),
                    Some(_) => return Err("has a `format` that is not a string".into()),
                };
                let choices = match (field.get("enum"), field.get("oneOf")) {
                    (Some(_), Some(_)) => {
                        return Err("has both `enum` and `oneOf`; give the choices once".into());
                    }
                    (Some(values), None) => Some(strings(values, "enum")?),
                    (None, Some(options)) => Some(consts(options, "oneOf")?),
                    (None, None) => None,
                };
                if let (Some(choices), Some(Value::Array(names))) =
                    (&choices, field.get("enumNames"))
                    && names.len() != choices.len()
                {
                    return Err("has `enumNames` of another length than its `enum`".into());
                }
                Ok(Self::Text {
                    min_length: count(field, "minLength")?,
                    max_length: count(field, "maxLength")?,
                    format,
                    choices,
                })
            }
            "number" | "integer" => {
                only_for(
                    &["enum", "oneOf", "anyOf", "items", "minLength", "maxLength"],
                    "a string or multi-select field",
                )?;
                Ok(Self::Number {
                    integer: kind == "integer",
                    minimum: bound(field, "minimum")?,
                    maximum: bound(field, "maximum")?,
                })
            }
            "boolean" => {
                only_for(
                    &["enum", "oneOf", "anyOf", "items", "minimum", "maximum"],
                    "another kind of field",
                )?;
                Ok(Self::Boolean)
            }
            "array" => {
                only_for(&["enum", "oneOf", "anyOf"], "the field's `items`")?;
                let Some(Value::Object(items)) = field.get("items") else {
                    return Err("is a list without an `items` object of its choices".into());
                };
                uncarried(items, "the field's items")?;
                let choices = match (items.get("enum"), items.get("anyOf").or(items.get("oneOf"))) {
                    (Some(values), None) => strings(values, "items.enum")?,
                    (None, Some(options)) => consts(options, "items.anyOf")?,
                    _ => {
                        return Err("is a list whose `items` give its choices not once, as \
                                    `enum` or `anyOf`"
                            .into());
                    }
                };
                Ok(Self::Choices {
                    choices,
                    min_items: count(field, "minItems")?,
                    max_items: count(field, "maxItems")?,
                })
            }
            "" => Err("has no `type`".into()),
            other => Err(format!(
                "is of type '{other}'; MCP forms have string, number, integer, boolean and \
                 enum fields"
            )),
        }
    }

    fn check(&self, value: &Value) -> Result<(), String> {
        match self {
            Self::Text {
                min_length,
                max_length,
                format,
                choices,
            } => {
                let Value::String(text) = value else {
                    return Err(format!("is {}, not a string", kind(value)));
                };
                if let Some(choices) = choices
                    && !choices.contains(text)
                {
                    return Err("is not one of the form's choices".into());
                }
                let length = u64::try_from(text.chars().count()).unwrap_or(u64::MAX);
                if let Some(min) = min_length
                    && length < *min
                {
                    return Err(format!("is shorter than {min} characters"));
                }
                if let Some(max) = max_length
                    && length > *max
                {
                    return Err(format!("is longer than {max} characters"));
                }
                match format {
                    Some(format) if !format.fits(text) => Err(format!("is not {}", format.name())),
                    _ => Ok(()),
                }
            }
            Self::Number {
                integer,
                minimum,
                maximum,
            } => {
                let Some(number) = value.as_f64() else {
                    return Err(format!("is {}, not a number", kind(value)));
                };
                if *integer && !(value.is_i64() || value.is_u64() || number.fract() == 0.0) {
                    return Err("is not an integer".into());
                }
                if let Some(min) = minimum
                    && number < *min
                {
                    return Err(format!("is below the minimum {min}"));
                }
                if let Some(max) = maximum
                    && number > *max
                {
                    return Err(format!("is above the maximum {max}"));
                }
                Ok(())
            }
            Self::Boolean => match value {
                Value::Bool(_) => Ok(()),
                other => Err(format!("is {}, not a boolean", kind(other))),
            },
            Self::Choices {
                choices,
                min_items,
                max_items,
            } => {
                let Value::Array(chosen) = value else {
                    return Err(format!("is {}, not a list of choices", kind(value)));
                };
                // Sets, not scans: a form may offer as many choices as its size allows, and an
                // answer may list each of them.
                if chosen.len() > choices.len() {
                    return Err(format!(
                        "has {} items, more than its {} choices",
                        chosen.len(),
                        choices.len()
                    ));
                }
                let offered: std::collections::HashSet<&str> =
                    choices.iter().map(String::as_str).collect();
                let mut seen = std::collections::HashSet::with_capacity(chosen.len());
                for (at, item) in chosen.iter().enumerate() {
                    let Some(item) = item.as_str().filter(|item| offered.contains(item)) else {
                        return Err(format!("has an item ({at}) that is not one of its choices"));
                    };
                    if !seen.insert(item) {
                        return Err(format!("chooses '{item}' twice"));
                    }
                }
                let length = u64::try_from(chosen.len()).unwrap_or(u64::MAX);
                if let Some(min) = min_items
                    && length < *min
                {
                    return Err(format!("has fewer than {min} choices"));
                }
                if let Some(max) = max_items
                    && length > *max
                {
                    return Err(format!("has more than {max} choices"));
                }
                Ok(())
            }
        }
    }
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Self::Email => "an e-mail address",
            Self::Uri => "a URI",
            Self::Date => "a date (YYYY-MM-DD)",
            Self::DateTime => "a date and time (RFC 3339)",
        }
    }

    fn fits(self, text: &str) -> bool {
        let plain = !text.chars().any(|c| c.is_whitespace() || c.is_control());
        plain
            && match self {
                Self::Email => text.rsplit_once('@').is_some_and(|(local, domain)| {
                    !local.is_empty()
                        && !domain.is_empty()
                        && !domain.starts_with('.')
                        && !domain.ends_with('.')
                }),
                Self::Uri => text.split_once(':').is_some_and(|(scheme, _)| {
                    scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                        && scheme
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
                }),
                Self::Date => is_date(text),
                Self::DateTime => text
                    .split_once(['T', 't'])
                    .is_some_and(|(date, time)| is_date(date) && is_time(time)),
            }
    }
}

/// `YYYY-MM-DD`, a day that exists.
fn is_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    if !text.is_ascii() || bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return false;
    }
    let (Some(year), Some(month), Some(day)) =
        (digits(&text[..4]), digits(&text[5..7]), digits(&text[8..]))
    else {
        return false;
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&day)
}

/// RFC 3339's `HH:MM:SS[.fraction](Z|±HH:MM)`.
fn is_time(text: &str) -> bool {
    let (clock, zone) = match text.find(['Z', 'z', '+', '-']) {
        Some(at) => text.split_at(at),
        None => return false,
    };
    let (clock, fraction) = clock.split_once('.').unwrap_or((clock, "0"));
    let hms = clock.split(':').map(digits).collect::<Vec<_>>();
    let [Some(hour), Some(minute), Some(second)] = hms.as_slice() else {
        return false;
    };
    let zone_ok = match zone {
        "Z" | "z" => true,
        offset => {
            let hm = offset[1..].split(':').map(digits).collect::<Vec<_>>();
            matches!(hm.as_slice(), [Some(h), Some(m)] if *h < 24 && *m < 60)
                && offset[1..].len() == 5
        }
    };
    clock.len() == 8
        && *hour < 24
        && *minute < 60
        && *second <= 60
        && !fraction.is_empty()
        && fraction.bytes().all(|b| b.is_ascii_digit())
        && zone_ok
}

fn digits(text: &str) -> Option<u32> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

/// JSON's name for the kind of `value`, for errors.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Refuses the keywords of [`UNCARRIED`] in `schema`.
fn uncarried(schema: &Map<String, Value>, what: &str) -> Result<(), String> {
    match UNCARRIED
        .iter()
        .find(|keyword| schema.contains_key(**keyword))
    {
        Some(keyword) => Err(format!(
            "{what} has `{keyword}`, which MCP's form schema cannot carry: no client would \
             enforce it"
        )),
        None => Ok(()),
    }
}

/// A non-negative integer keyword, if given.
fn count(schema: &Map<String, Value>, keyword: &str) -> Result<Option<u64>, String> {
    match schema.get(keyword) {
        None => Ok(None),
        Some(value) => value
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("has a `{keyword}` that is not a non-negative integer")),
    }
}

/// A numeric keyword, if given.
fn bound(schema: &Map<String, Value>, keyword: &str) -> Result<Option<f64>, String> {
    match schema.get(keyword) {
        None => Ok(None),
        Some(value) => value
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("has a `{keyword}` that is not a number")),
    }
}

/// A non-empty list of strings.
fn strings(values: &Value, keyword: &str) -> Result<Vec<String>, String> {
    match values {
        Value::Array(values) if !values.is_empty() => values
            .iter()
            .map(|value| value.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| format!("has a `{keyword}` with a choice that is not a string")),
        _ => Err(format!("has a `{keyword}` that is not a non-empty list")),
    }
}

/// The `const` strings of a non-empty list of `{const, title}` options.
fn consts(options: &Value, keyword: &str) -> Result<Vec<String>, String> {
    match options {
        Value::Array(options) if !options.is_empty() => options
            .iter()
            .map(|option| {
                option
                    .get("const")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| format!("has a `{keyword}` option without a string `const`")),
        _ => Err(format!("has a `{keyword}` that is not a non-empty list")),
    }
}

/// Checks every string of the schema (names, titles, descriptions, choices), all of which a
/// client may show, as a question's message is checked ([`check_shown`]).
fn strings_shown(schema: &Value) -> Result<(), String> {
    let problem = |text: &str| {
        check_shown(text).map_err(|problem| {
            format!(
                "the form's schema has a text that {problem}: \"{}\"",
                text.escape_debug()
            )
        })
    };
    match schema {
        Value::String(text) => problem(text),
        Value::Array(values) => values.iter().try_for_each(strings_shown),
        Value::Object(object) => object.iter().try_for_each(|(key, value)| {
            problem(key)?;
            strings_shown(value)
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn form(schema: Value) -> Form {
        Form::parse(&schema).unwrap_or_else(|e| panic!("{e}"))
    }

    fn answer(content: Value) -> Map<String, Value> {
        match content {
            Value::Object(content) => content,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn an_answer_with_a_wrong_type_or_an_extra_field_does_not_fit() {
        let name = form(json!({
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"]
        }));
        assert_eq!(name.check(&answer(json!({"name": "Ada"}))), Ok(()));
        let forged = name.check(&answer(json!({"name": 12345, "role": "admin"})));
        assert_eq!(
            forged,
            Err("its field 'name' is a number, not a string".into())
        );
        let extra = name.check(&answer(json!({"name": "Ada", "role": "admin"})));
        assert_eq!(
            extra,
            Err("it has a field 'role', which the form does not ask for".into())
        );
        assert_eq!(
            name.check(&Map::new()),
            Err("it leaves out the required field 'name'".into())
        );
        assert!(name.check(&answer(json!({"name": null}))).is_err());
    }

    #[test]
    fn every_kind_of_field_mcp_allows_is_checked() {
        let everything = form(json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 2, "maxLength": 4, "default": "Ada"},
                "email": {"type": "string", "format": "email"},
                "site": {"type": "string", "format": "uri"},
                "born": {"type": "string", "format": "date"},
                "seen": {"type": "string", "format": "date-time"},
                "age": {"type": "integer", "minimum": 0, "maximum": 150, "format": "uint32"},
                "score": {"type": "number", "minimum": 0.5},
                "ok": {"type": "boolean"},
                "size": {"type": "string", "enum": ["s", "l"], "enumNames": ["Small", "Large"]},
                "tier": {"type": "string", "oneOf": [{"const": "a", "title": "A"}]},
                "tags": {"type": "array", "minItems": 1, "maxItems": 2,
                         "items": {"type": "string", "enum": ["x", "y", "z"]}},
                "picks": {"type": "array", "items": {"anyOf": [{"const": "p", "title": "P"}]}}
            }
        }));
        let good = json!({
            "name": "Ada", "email": "ada@example.com", "site": "https://example.com/a",
            "born": "2000-02-29", "seen": "2026-07-28T12:30:00.5+02:00", "age": 36,
            "score": 88, "ok": false, "size": "l", "tier": "a", "tags": ["x", "z"],
            "picks": ["p"]
        });
        assert_eq!(everything.check(&answer(good)), Ok(()));
        for (bad, why) in [
            (json!({"name": "A"}), "shorter than 2"),
            (json!({"name": "Adaline"}), "longer than 4"),
            (json!({"email": "ada"}), "e-mail"),
            (json!({"email": "a da@example.com"}), "e-mail"),
            (json!({"site": "no scheme"}), "URI"),
            (json!({"born": "2001-02-29"}), "date"),
            (json!({"seen": "2026-07-28 12:30:00Z"}), "date and time"),
            (json!({"seen": "2026-07-28T25:30:00Z"}), "date and time"),
            (json!({"age": 1.5}), "not an integer"),
            (json!({"age": -1}), "below the minimum"),
            (json!({"age": "36"}), "not a number"),
            (json!({"score": 0.25}), "below the minimum"),
            (json!({"ok": "true"}), "not a boolean"),
            (json!({"size": "m"}), "not one of the form's choices"),
            (json!({"tier": "A"}), "not one of the form's choices"),
            (json!({"tags": []}), "fewer than 1"),
            (json!({"tags": ["x", "y", "z"]}), "more than 2"),
            (json!({"tags": ["x", "x"]}), "twice"),
            (
                json!({"tags": ["x", "y", "z", "x"]}),
                "more than its 3 choices",
            ),
            (json!({"tags": ["w"]}), "not one of its choices"),
            (json!({"tags": "x"}), "not a list"),
        ] {
            let result = everything.check(&answer(bad.clone()));
            assert!(
                result.as_ref().is_err_and(|text| text.contains(why)),
                "{bad}: {result:?}"
            );
        }
        assert_eq!(everything.items(), 12 + 2 + 1 + 3 + 1);
    }

    /// The forms of `plugins/conformance` (SEP-1034 defaults, SEP-1330 enums) with the
    /// answers the MCP conformance suite gives them.
    #[test]
    fn the_conformance_suites_forms_and_answers_fit() {
        let defaults = form(json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                "age": {"type": "integer", "description": "User age", "default": 30},
                "score": {"type": "number", "description": "User score", "default": 95.5},
                "status": {"type": "string", "enum": ["active", "inactive", "pending"],
                           "default": "active"},
                "verified": {"type": "boolean", "default": true}
            },
            "required": []
        }));
        let answer_1034 = json!({"name": "Jane Smith", "age": 25, "score": 88,
                                 "status": "inactive", "verified": false});
        assert_eq!(defaults.check(&answer(answer_1034)), Ok(()));
        let choices = |titles: [&str; 3]| {
            titles
                .iter()
                .enumerate()
                .map(|(at, title)| json!({"const": format!("value{}", at + 1), "title": title}))
                .collect::<Vec<_>>()
        };
        let enums = form(json!({
            "type": "object",
            "properties": {
                "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                "titledSingle": {"type": "string", "oneOf": choices(["A", "B", "C"])},
                "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                               "enumNames": ["Option One", "Option Two", "Option Three"]},
                "untitledMulti": {"type": "array", "minItems": 1, "maxItems": 3,
                                  "items": {"type": "string",
                                            "enum": ["option1", "option2", "option3"]}},
                "titledMulti": {"type": "array", "minItems": 1, "maxItems": 3,
                                "items": {"anyOf": choices(["A", "B", "C"])}}
            },
            "required": []
        }));
        let answer_1330 = json!({"untitledSingle": "option1", "titledSingle": "value1",
                                 "legacyEnum": "opt1", "untitledMulti": ["option1", "option2"],
                                 "titledMulti": ["value1", "value2"]});
        assert_eq!(enums.check(&answer(answer_1330)), Ok(()));
    }

    #[test]
    fn a_schema_mcp_cannot_carry_is_refused() {
        for (schema, why) in [
            (json!({"type": "string"}), "\"type\": \"object\""),
            (json!({"type": "object"}), "no `properties`"),
            (
                json!({"type": "object", "properties": {"a": {"type": "object"}}}),
                "type 'object'",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "^a"}}}),
                "`pattern`",
            ),
            (
                json!({"type": "object", "properties": {"a": {"$ref": "#/x"}}}),
                "`$ref`",
            ),
            (
                json!({"type": "object", "properties": {}, "allOf": []}),
                "`allOf`",
            ),
            (
                json!({"type": "object", "properties": {}, "additionalProperties": true}),
                "additionalProperties",
            ),
            (
                json!({"type": "object", "properties": {}, "required": ["a"]}),
                "requires field 'a'",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "format": "ipv4"}}}),
                "format 'ipv4'",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "enum": ["x"], "oneOf": [{"const": "y"}]}}}),
                "both",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "integer", "enum": [1]}}}),
                "`enum`",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}}),
                "`items`",
            ),
            (
                json!({"type": "object", "properties": {"a\u{202E}": {"type": "string"}}}),
                "U+202E",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "description": "x\ry"}}}),
                "U+000D",
            ),
            // The host's attribution imitated in the form's title, or buried under blank lines.
            (
                json!({"type": "object", "title": "[plugin 'github', tool 'login' asks]", "properties": {}}),
                "imitates the host's attribution",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "title": "\n\n\n\nToken"}}}),
                "blank lines",
            ),
        ] {
            let result = Form::parse(&schema);
            assert!(
                result.as_ref().is_err_and(|text| text.contains(why)),
                "{schema}: {result:?}"
            );
        }
    }
}
