//! Tool definitions in the JSON shapes of LLM providers and of MCP; see [`provider_json_with`]
//! for how each format's schema dialect is written.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::{Map, Number, Value, json};

use crate::tool_server::LlmToolDefinition;

/// A provider's shape for tool definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProviderFormat {
    /// OpenAI chat completions: `[{"type":"function","function":{name, description, parameters}}]`.
    OpenAi,
    /// Anthropic messages: `[{name, description, input_schema}]`.
    Anthropic,
    /// Gemini: `{"functionDeclarations":[{name, description, parameters}]}`.
    Gemini,
    /// MCP `tools/list` result: `{"tools":[{name, description, inputSchema}]}`.
    Mcp,
}

impl std::str::FromStr for ProviderFormat {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name.to_ascii_lowercase().as_str() {
            "openai" => Ok(Self::OpenAi),
            "anthropic" => Ok(Self::Anthropic),
            "gemini" => Ok(Self::Gemini),
            "mcp" => Ok(Self::Mcp),
            other => Err(format!(
                "unknown format {other:?}; use openai, anthropic, gemini or mcp"
            )),
        }
    }
}

impl fmt::Display for ProviderFormat {
    /// The name [`FromStr`](std::str::FromStr) takes: `openai`, `anthropic`, `gemini`, `mcp`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
            Self::Mcp => "mcp",
        })
    }
}

/// How [`provider_json_with`] writes the definitions.
#[non_exhaustive]
#[derive(Debug, Clone, Default)]
pub struct ProviderOptions {
    /// OpenAI only: declare each function with `"strict": true` and a schema that OpenAI's
    /// strict mode (Structured Outputs) accepts. Every property becomes required. One that was
    /// optional and accepts `null` (an `Option`) stays nullable, so the model sends `null` where
    /// it would have left it out; one that was optional but does not accept `null` (a field with
    /// a default, say) is not made nullable, because the tool's own input schema, which the
    /// host checks every call against, would refuse that `null`: the model gives a value.
    pub strict: bool,
}

impl ProviderOptions {
    /// These options with [`strict`](field@Self::strict) set.
    #[must_use]
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }
}

/// Why tool definitions cannot be written in a provider's shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// Strict schemas were asked for a format other than OpenAI.
    #[error(
        "strict schemas are OpenAI's (strict mode of function calling); the {format} format has \
         none: use the openai format, or leave strict off"
    )]
    StrictNeedsOpenAi {
        /// The format asked for.
        format: ProviderFormat,
    },
    /// A tool's input schema refers to itself, and the format needs every reference inlined.
    #[error(
        "tool '{tool}' cannot be declared for {target}: its input schema is recursive (`$ref` \
         {reference} at {place} refers back to a schema that contains it), and {target} takes \
         no references, so the schema would never end; give the tool an argument type that does \
         not contain itself (e.g. bound the depth, or take the nested part as a JSON string), or \
         use another format",
        target = target(.format, .strict),
        place = place(.pointer)
    )]
    Recursive {
        /// The tool.
        tool: String,
        /// The format asked for.
        format: ProviderFormat,
        /// Whether strict schemas were asked for.
        strict: bool,
        /// JSON pointer (RFC 6901) to the reference, in the tool's input schema.
        pointer: String,
        /// The reference that closes the cycle.
        reference: String,
    },
    /// A part of a tool's input schema has no equivalent in the format.
    #[error(
        "tool '{tool}' cannot be declared for {target}: at {place}, {reason}",
        target = target(.format, .strict),
        place = place(.pointer)
    )]
    Unsupported {
        /// The tool.
        tool: String,
        /// The format asked for.
        format: ProviderFormat,
        /// Whether strict schemas were asked for.
        strict: bool,
        /// JSON pointer (RFC 6901) to the part, in the tool's input schema (`""`: the root).
        pointer: String,
        /// What is wrong there and what to do.
        reason: String,
    },
}

impl ProviderError {
    /// The tool whose definition failed, if the error is about one tool.
    pub fn tool(&self) -> Option<&str> {
        match self {
            Self::StrictNeedsOpenAi { .. } => None,
            Self::Recursive { tool, .. } | Self::Unsupported { tool, .. } => Some(tool),
        }
    }

    /// JSON pointer (RFC 6901) to the failing part of the tool's input schema, if any.
    pub fn pointer(&self) -> Option<&str> {
        match self {
            Self::StrictNeedsOpenAi { .. } => None,
            Self::Recursive { pointer, .. } | Self::Unsupported { pointer, .. } => Some(pointer),
        }
    }
}

fn target(format: &ProviderFormat, strict: &bool) -> String {
    if *strict && *format == ProviderFormat::OpenAi {
        "openai strict mode".to_owned()
    } else {
        format.to_string()
    }
}

fn place(pointer: &str) -> String {
    if pointer.is_empty() {
        "the root of its input schema".to_owned()
    } else {
        format!("{pointer} in its input schema")
    }
}

/// The schema without `$schema` (providers do not want it).
fn parameters(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
    }
    schema
}

/// `definitions` (already sorted by name) in `format`'s shape, with the default options.
///
/// # Errors
///
/// If a tool's input schema cannot be written for `format` (see [`provider_json_with`]).
pub fn provider_json(
    definitions: &[LlmToolDefinition],
    format: ProviderFormat,
) -> Result<Value, ProviderError> {
    provider_json_with(definitions, format, &ProviderOptions::default())
}

/// `definitions` (already sorted by name) in `format`'s shape, each input schema rewritten in
/// the dialect the provider accepts.
///
/// Tools describe their input with JSON Schema (2020-12, as schemars writes it); providers take
/// different dialects:
///
/// - **MCP** gets the schema as it is; **Anthropic** and **OpenAI** (not strict) get it
///   without `$schema`.
/// - **Gemini** (`functionDeclarations[].parameters`) takes a subset of OpenAPI 3.0's schema
///   object (Google's `Schema`: type, format, title, description, nullable, enum, maxItems,
///   minItems, properties, required, minProperties, maxProperties, minLength, maxLength,
///   pattern, example, anyOf, propertyOrdering, default, items, minimum, maximum). References
///   are inlined (a recursive type is an error), a `null` member of a type list or of an
///   `anyOf`/`oneOf` becomes `nullable: true`, `oneOf` becomes `anyOf`, `const` a one-value
///   `enum` (Gemini's enum values are strings), `allOf` is merged, formats other than
///   `float`/`double` (numbers), `int32`/`int64` (integers) and `enum`/`date-time` (strings)
///   are dropped, an exclusive bound becomes an inclusive one, and every other keyword
///   (`additionalProperties`, `$defs`, `multipleOf`, …) is removed. A tool without parameters
///   gets no `parameters`: Gemini refuses an object schema without properties.
/// - **OpenAI strict** ([`ProviderOptions::strict()`]): the function gets `"strict": true` and a
///   schema in the subset of OpenAI's Structured Outputs: every object has
///   `additionalProperties: false` and lists all its properties in `required` (an optional
///   property that accepts `null`, an `Option`, stays nullable; one that does not is not made
///   nullable, since the tool's own schema, checked on every call, would refuse `null`),
///   `oneOf` becomes `anyOf`, references are kept
///   (recursion is allowed) unless keywords beside them need them inlined, and keywords strict
///   mode does not take are removed (`default`, `minLength`, `uniqueItems`, formats it does
///   not list, …). What strict mode cannot express is an error naming the tool and the part:
///   an object with keys it does not name (a map, `additionalProperties`), a value of any
///   type (`{}`, `true`, an array without `items`), `not`/`if`/`dependentSchemas`, or a root
///   that is not an object.
///
/// A tuple (`prefixItems`) becomes an array whose items are any of the tuple's item types, for
/// both Gemini and strict mode. Removing a keyword only loosens what the model is told; the tool
/// still checks its arguments.
///
/// # Errors
///
/// [`ProviderError::StrictNeedsOpenAi`] for strict options with a format other than OpenAI;
/// [`ProviderError::Recursive`] for a recursive schema and Gemini;
/// [`ProviderError::Unsupported`] for a part of a schema the format cannot express, e.g. a
/// free-form object in OpenAI's strict mode.
pub fn provider_json_with(
    definitions: &[LlmToolDefinition],
    format: ProviderFormat,
    options: &ProviderOptions,
) -> Result<Value, ProviderError> {
    if options.strict && format != ProviderFormat::OpenAi {
        return Err(ProviderError::StrictNeedsOpenAi { format });
    }
    let each = definitions.iter();
    Ok(match format {
        ProviderFormat::OpenAi => Value::Array(
            each.map(|d| {
                let mut function = json!({"name": d.name, "description": d.description});
                if options.strict {
                    function["parameters"] =
                        Lowering::new(&d.name, &d.input_schema, format, true).strict_root()?;
                    function["strict"] = Value::Bool(true);
                } else {
                    function["parameters"] = parameters(&d.input_schema);
                }
                Ok(json!({"type": "function", "function": function}))
            })
            .collect::<Result<_, ProviderError>>()?,
        ),
        ProviderFormat::Anthropic => each
            .map(|d| {
                json!({"name": d.name, "description": d.description,
                    "input_schema": parameters(&d.input_schema)})
            })
            .collect(),
        ProviderFormat::Gemini => json!({"functionDeclarations": each
            .map(|d| {
                let mut declaration = json!({"name": d.name, "description": d.description});
                if let Some(parameters) =
                    Lowering::new(&d.name, &d.input_schema, format, false).gemini_root()?
                {
                    declaration["parameters"] = parameters;
                }
                Ok(declaration)
            })
            .collect::<Result<Vec<_>, ProviderError>>()?}),
        ProviderFormat::Mcp => json!({"tools": each
            .map(|d| json!({"name": d.name, "description": d.description,
                "inputSchema": d.input_schema}))
            .collect::<Vec<_>>()}),
    })
}

/// Most schema nodes one tool's lowered schema may have (inlining can multiply them).
const MAX_NODES: usize = 100_000;
/// Deepest nesting of schemas (with references inlined) one tool may have.
const MAX_DEPTH: usize = 128;

/// Keywords that only annotate: of two merged schemas, the first keeps its own.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "example",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$schema",
    "$id",
    "$anchor",
];

/// The string formats OpenAI's strict mode lists as supported.
const OPENAI_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Gemini's keywords that apply to one type only (the rest apply to any).
fn gemini_keywords_of(kind: &str) -> &'static [&'static str] {
    match kind {
        "string" => &["format", "enum", "minLength", "maxLength", "pattern"],
        "integer" | "number" => &["format", "enum", "minimum", "maximum"],
        "array" => &["items", "minItems", "maxItems"],
        "object" => &[
            "properties",
            "required",
            "minProperties",
            "maxProperties",
            "propertyOrdering",
        ],
        _ => &[],
    }
}

/// Whether Gemini takes `format` for values of type `kind`.
fn gemini_format(kind: &str, format: &str) -> bool {
    matches!(
        (kind, format),
        ("number", "float" | "double")
            | ("integer", "int32" | "int64")
            | ("string", "enum" | "date-time")
    )
}

/// `name` as one token of a JSON pointer.
fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// The inverse of [`escape`].
fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// A URI fragment with its `%XX` escapes decoded (as `$ref` fragments are written).
fn percent_decode(fragment: &str) -> String {
    let bytes = fragment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(high), Some(low)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.extend(u8::try_from(high * 16 + low).ok());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| fragment.to_owned())
}

/// The names in a `type` keyword (a string or a list of strings).
fn type_names(kind: &Value) -> Vec<String> {
    match kind {
        Value::String(name) => vec![name.clone()],
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// A `type` keyword for `names`: a string for one.
fn type_value(mut names: Vec<String>) -> Value {
    if names.len() == 1 {
        Value::String(names.remove(0))
    } else {
        names.into_iter().map(Value::String).collect()
    }
}

/// The JSON type of every value, if they share one.
fn type_of_values(values: &[Value]) -> Option<&'static str> {
    let kind = |value: &Value| match value {
        Value::String(_) => Some("string"),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some("integer"),
        Value::Number(_) => Some("number"),
        Value::Bool(_) => Some("boolean"),
        _ => None,
    };
    let first = kind(values.first()?)?;
    values
        .iter()
        .all(|value| match (kind(value), first) {
            (Some("integer" | "number"), "integer" | "number") => true,
            (other, first) => other == Some(first),
        })
        .then(|| {
            if first == "integer" && values.iter().any(|v| kind(v) == Some("number")) {
                "number"
            } else {
                first
            }
        })
}

/// Merges schema `from` into `into` (both must hold, as in `allOf`): annotations of `into`
/// win, properties and `required` are joined, types intersected. `Err(key)` on a conflict.
fn merge_schemas(into: &mut Map<String, Value>, from: &Map<String, Value>) -> Result<(), String> {
    for (key, value) in from {
        let Some(existing) = into.get_mut(key) else {
            into.insert(key.clone(), value.clone());
            continue;
        };
        if *existing == *value || ANNOTATIONS.contains(&key.as_str()) {
            continue;
        }
        match key.as_str() {
            // Referenced from the root only: whatever is beside it here is never read.
            "$defs" | "definitions" => {}
            "properties" => {
                let (Some(mine), Some(theirs)) = (existing.as_object_mut(), value.as_object())
                else {
                    return Err(key.clone());
                };
                for (name, schema) in theirs {
                    match mine.get_mut(name) {
                        None => {
                            mine.insert(name.clone(), schema.clone());
                        }
                        Some(same) if *same == *schema => {}
                        Some(other) => *other = json!({"allOf": [other.take(), schema.clone()]}),
                    }
                }
            }
            "required" | "allOf" => {
                let (Some(mine), Some(theirs)) = (existing.as_array_mut(), value.as_array()) else {
                    return Err(key.clone());
                };
                for item in theirs {
                    if key == "allOf" || !mine.contains(item) {
                        mine.push(item.clone());
                    }
                }
            }
            "type" => {
                let theirs = type_names(value);
                let mut both = Vec::new();
                for name in type_names(existing) {
                    let kept = if theirs.contains(&name) {
                        Some(name)
                    } else if (name == "integer" && theirs.iter().any(|t| t == "number"))
                        || (name == "number" && theirs.iter().any(|t| t == "integer"))
                    {
                        Some("integer".to_owned())
                    } else {
                        None
                    };
                    if let Some(kept) = kept
                        && !both.contains(&kept)
                    {
                        both.push(kept);
                    }
                }
                if both.is_empty() {
                    return Err(key.clone());
                }
                *existing = type_value(both);
            }
            _ => return Err(key.clone()),
        }
    }
    Ok(())
}

/// Whether strict mode may keep `reference` as a reference: to the root, or to an entry of the
/// root's `$defs` or `definitions` (emitted there).
fn keepable(reference: &str) -> bool {
    let Some(fragment) = reference.strip_prefix('#') else {
        return false;
    };
    let pointer = percent_decode(fragment);
    pointer.is_empty()
        || ["/$defs/", "/definitions/"].iter().any(|container| {
            pointer
                .strip_prefix(container)
                .is_some_and(|name| !name.is_empty() && !name.contains('/'))
        })
}

/// One tool's input schema, rewritten for Gemini or for OpenAI's strict mode.
struct Lowering<'a> {
    tool: &'a str,
    format: ProviderFormat,
    strict: bool,
    root: &'a Value,
    /// The references being inlined, outermost first: meeting one again is a cycle.
    expanding: Vec<String>,
    /// Strict mode: the references kept as references, whose targets go to `$defs`.
    kept: BTreeSet<String>,
    nodes: usize,
    depth: usize,
}

impl<'a> Lowering<'a> {
    fn new(tool: &'a str, root: &'a Value, format: ProviderFormat, strict: bool) -> Self {
        Self {
            tool,
            format,
            strict,
            root,
            expanding: vec!["#".to_owned()],
            kept: BTreeSet::new(),
            nodes: 0,
            depth: 0,
        }
    }

    fn unsupported(&self, pointer: &str, reason: impl Into<String>) -> ProviderError {
        ProviderError::Unsupported {
            tool: self.tool.to_owned(),
            format: self.format,
            strict: self.strict,
            pointer: pointer.to_owned(),
            reason: reason.into(),
        }
    }

    fn recursive(&self, pointer: &str, reference: &str) -> ProviderError {
        ProviderError::Recursive {
            tool: self.tool.to_owned(),
            format: self.format,
            strict: self.strict,
            pointer: pointer.to_owned(),
            reference: reference.to_owned(),
        }
    }

    /// What to do, at the end of a strict-mode error.
    const LEAVE_STRICT: &'static str = "or leave strict mode off";

    /// The target of local reference `reference` (met at `at`), and its JSON pointer.
    fn resolve(&self, reference: &str, at: &str) -> Result<(&'a Value, String), ProviderError> {
        let pointer = reference
            .strip_prefix('#')
            .map(percent_decode)
            .filter(|p| p.is_empty() || p.starts_with('/'))
            .ok_or_else(|| {
                self.unsupported(
                    at,
                    format!(
                        "`$ref` {reference:?} is not a local JSON pointer (#/…), so it cannot be \
                         inlined; refer to `$defs` of the same schema"
                    ),
                )
            })?;
        let target = self.root.pointer(&pointer).ok_or_else(|| {
            self.unsupported(
                at,
                format!("`$ref` {reference:?} points to nothing in the schema; fix the reference"),
            )
        })?;
        Ok((target, pointer))
    }

    /// `node` (at `at` in the input schema), rewritten.
    fn lower(&mut self, node: &Value, at: &str) -> Result<Value, ProviderError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(self.unsupported(
                at,
                format!(
                    "inlining its references makes the schema larger than {MAX_NODES} parts; \
                     simplify the argument types"
                ),
            ));
        }
        if self.depth >= MAX_DEPTH {
            return Err(self.unsupported(
                at,
                format!(
                    "the schema (references inlined) nests deeper than {MAX_DEPTH} levels; \
                     simplify the argument types"
                ),
            ));
        }
        self.depth += 1;
        let lowered = self.lower_node(node, at);
        self.depth -= 1;
        lowered
    }

    fn lower_node(&mut self, node: &Value, at: &str) -> Result<Value, ProviderError> {
        let schema = match node {
            Value::Object(schema) => schema,
            Value::Bool(true) if self.strict => {
                return Err(self.unsupported(
                    at,
                    format!(
                        "the schema `true` accepts any JSON value; strict mode needs a type for \
                         every value: give this part a concrete type, {}",
                        Self::LEAVE_STRICT
                    ),
                ));
            }
            Value::Bool(true) => return Ok(json!({})),
            Value::Bool(false) => {
                return Err(self.unsupported(
                    at,
                    "the schema `false` accepts no value; remove this part from the schema",
                ));
            }
            _ => {
                return Err(self.unsupported(
                    at,
                    "this is not a schema (neither an object nor a boolean); fix the schema",
                ));
            }
        };
        if let Some(reference) = schema.get("$ref") {
            return self.inline_reference(schema, reference, at);
        }
        if let Some(branches) = schema.get("allOf") {
            return self.merge_all_of(schema, branches, at);
        }
        if self.strict {
            self.strict_node(schema, at)
        } else {
            self.gemini_node(schema, at)
        }
    }

    /// A schema with `$ref`: kept as it is (strict mode, nothing beside it), or its target
    /// merged with the keywords beside it and rewritten.
    fn inline_reference(
        &mut self,
        schema: &Map<String, Value>,
        reference: &Value,
        at: &str,
    ) -> Result<Value, ProviderError> {
        let here = format!("{at}/$ref");
        let reference = reference
            .as_str()
            .ok_or_else(|| self.unsupported(&here, "`$ref` is not a string; fix the schema"))?;
        let keep = self.strict && keepable(reference);
        if keep && schema.len() == 1 {
            self.resolve(reference, &here)?;
            self.kept.insert(reference.to_owned());
            return Ok(json!({"$ref": reference}));
        }
        if self.expanding.iter().any(|r| r == reference) {
            if keep {
                // Recursion is fine in strict mode; what is beside the reference is lost.
                self.kept.insert(reference.to_owned());
                return Ok(json!({"$ref": reference}));
            }
            return Err(self.recursive(&here, reference));
        }
        let (target, target_at) = self.resolve(reference, &here)?;
        let mut merged = schema.clone();
        merged.remove("$ref");
        match target {
            Value::Object(target) => merge_schemas(&mut merged, target).map_err(|key| {
                self.unsupported(
                    at,
                    format!(
                        "`$ref` {reference:?} and the keywords beside it disagree on `{key}`, so \
                         they cannot be written as one schema; simplify the type"
                    ),
                )
            })?,
            Value::Bool(true) => {}
            other => return self.lower(other, &target_at),
        }
        self.expanding.push(reference.to_owned());
        let lowered = self.lower(&Value::Object(merged), &target_at);
        self.expanding.pop();
        lowered
    }

    /// A schema with `allOf`: its branches (references resolved) merged into it, rewritten.
    fn merge_all_of(
        &mut self,
        schema: &Map<String, Value>,
        branches: &Value,
        at: &str,
    ) -> Result<Value, ProviderError> {
        let here = format!("{at}/allOf");
        let branches = branches.as_array().ok_or_else(|| {
            self.unsupported(&here, "`allOf` is not a list of schemas; fix the schema")
        })?;
        let mut merged = schema.clone();
        merged.remove("allOf");
        let mut pushed = 0;
        let mut result = Ok(());
        for (i, branch) in branches.iter().enumerate() {
            let branch_at = format!("{here}/{i}");
            result = self.merge_branch(&mut merged, branch, &branch_at, &mut pushed);
            if result.is_err() {
                break;
            }
        }
        let lowered = result.and_then(|()| self.lower(&Value::Object(merged), at));
        self.expanding.truncate(self.expanding.len() - pushed);
        lowered
    }

    fn merge_branch(
        &mut self,
        merged: &mut Map<String, Value>,
        branch: &Value,
        at: &str,
        pushed: &mut usize,
    ) -> Result<(), ProviderError> {
        let mut branch = match branch {
            Value::Object(branch) => branch.clone(),
            Value::Bool(true) => return Ok(()),
            _ => {
                return Err(self.unsupported(
                    at,
                    "this `allOf` branch accepts no value; remove it from the schema",
                ));
            }
        };
        if let Some(reference) = branch.remove("$ref") {
            let here = format!("{at}/$ref");
            let reference = reference
                .as_str()
                .ok_or_else(|| self.unsupported(&here, "`$ref` is not a string; fix the schema"))?;
            if self.expanding.iter().any(|r| r == reference) {
                return Err(self.recursive(&here, reference));
            }
            let (target, _) = self.resolve(reference, &here)?;
            if let Value::Object(target) = target {
                merge_schemas(&mut branch, target).map_err(|key| self.conflict(at, &key))?;
            }
            self.expanding.push(reference.to_owned());
            *pushed += 1;
        }
        merge_schemas(merged, &branch).map_err(|key| self.conflict(at, &key))
    }

    fn conflict(&self, at: &str, key: &str) -> ProviderError {
        self.unsupported(
            at,
            format!(
                "the schemas of `allOf` disagree on `{key}`, so they cannot be merged into one; \
                 simplify the type"
            ),
        )
    }

    /// Gemini's parameters for the tool: `None` if it has none.
    fn gemini_root(mut self) -> Result<Option<Value>, ProviderError> {
        let root = self.root;
        let Value::Object(mut lowered) = self.lower(root, "")? else {
            return Ok(None);
        };
        lowered.remove("nullable");
        let is_object = match lowered.get("type") {
            None => lowered.contains_key("properties") || lowered.is_empty(),
            Some(kind) => kind == "object",
        };
        if !is_object {
            return Err(self.unsupported(
                "",
                "the input schema is not an object; Gemini declares a function's parameters as \
                 an object of named properties: take the arguments as a struct",
            ));
        }
        let empty = lowered
            .get("properties")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty);
        if empty {
            // Gemini refuses an object without properties: no parameters at all.
            return Ok(None);
        }
        lowered.insert("type".into(), "object".into());
        Ok(Some(Value::Object(lowered)))
    }

    /// One schema object (no `$ref`, no `allOf`) in Gemini's subset.
    fn gemini_node(
        &mut self,
        schema: &Map<String, Value>,
        at: &str,
    ) -> Result<Value, ProviderError> {
        let mut out = Map::new();
        let mut nullable = schema.get("nullable") == Some(&Value::Bool(true));
        let mut types = schema.get("type").map(type_names).unwrap_or_default();
        if types.len() > 1 && types.iter().any(|t| t == "null") {
            nullable = true;
            types.retain(|t| t != "null");
        }
        let mut values = match (schema.get("enum"), schema.get("const")) {
            (Some(Value::Array(values)), _) => Some(values.clone()),
            (_, Some(value)) => Some(vec![value.clone()]),
            _ => None,
        };
        if let Some(values) = &mut values
            && values.contains(&Value::Null)
        {
            values.retain(|v| !v.is_null());
            if values.is_empty() {
                types = vec!["null".to_owned()];
            } else {
                nullable = true;
            }
        }
        if types.is_empty() {
            if schema.contains_key("properties") {
                types.push("object".to_owned());
            } else if schema.contains_key("items") || schema.contains_key("prefixItems") {
                types.push("array".to_owned());
            } else if let Some(kind) = values.as_deref().and_then(type_of_values) {
                types.push(kind.to_owned());
            }
        }
        for (key, value) in schema {
            let here = format!("{at}/{}", escape(key));
            match key.as_str() {
                "properties" => {
                    let mut properties = Map::new();
                    for (name, property) in value.as_object().into_iter().flatten() {
                        let lowered = self.lower(property, &format!("{here}/{}", escape(name)))?;
                        properties.insert(name.clone(), lowered);
                    }
                    out.insert(key.clone(), Value::Object(properties));
                }
                "items" | "prefixItems" => {
                    let tuple = schema.contains_key("prefixItems") || value.is_array();
                    if tuple && !out.contains_key("items") {
                        out.insert("items".into(), self.tuple_items(schema, at)?);
                    } else if !tuple {
                        out.insert("items".into(), self.lower(value, &here)?);
                    }
                }
                "required" => {
                    let names = schema.get("properties").and_then(Value::as_object);
                    let required: Vec<Value> = value
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|name| {
                            name.as_str()
                                .is_some_and(|name| names.is_some_and(|n| n.contains_key(name)))
                        })
                        .cloned()
                        .collect();
                    if !required.is_empty() {
                        out.insert(key.clone(), Value::Array(required));
                    }
                }
                "examples" => {
                    if !schema.contains_key("example")
                        && let Some(first) = value.as_array().and_then(|v| v.first())
                    {
                        out.insert("example".into(), first.clone());
                    }
                }
                "title" | "description" | "default" | "example" | "pattern" | "minLength"
                | "maxLength" | "minItems" | "maxItems" | "minProperties" | "maxProperties"
                | "minimum" | "maximum" | "propertyOrdering" => {
                    out.insert(key.clone(), value.clone());
                }
                // Done below, or not in Gemini's subset.
                _ => {}
            }
        }
        match types.len() {
            0 => {}
            1 => {
                out.insert("type".into(), Value::String(types[0].clone()));
            }
            _ => {
                // Several types: one branch each, with the keywords of that type.
                let branches = types
                    .iter()
                    .map(|kind| {
                        let mut branch = Map::new();
                        branch.insert("type".into(), Value::String(kind.clone()));
                        for keyword in gemini_keywords_of(kind) {
                            if let Some(value) = out.get(*keyword) {
                                branch.insert((*keyword).into(), value.clone());
                            }
                        }
                        Value::Object(branch)
                    })
                    .collect::<Vec<_>>();
                for kind in &types {
                    for keyword in gemini_keywords_of(kind) {
                        out.remove(*keyword);
                    }
                }
                out.insert("anyOf".into(), Value::Array(branches));
            }
        }
        let kind = out.get("type").and_then(Value::as_str).map(str::to_owned);
        if let Some(values) = values
            && kind.as_deref() != Some("boolean")
            && kind.as_deref() != Some("null")
        {
            let strings = values
                .iter()
                .map(|v| match v {
                    Value::String(s) => Value::String(s.clone()),
                    other => Value::String(other.to_string()),
                })
                .collect();
            out.insert("enum".into(), Value::Array(strings));
            match kind.as_deref() {
                Some("integer" | "number") => {
                    out.insert("format".into(), "enum".into());
                }
                None if !out.contains_key("anyOf") => {
                    out.insert("type".into(), "string".into());
                }
                _ => {}
            }
        }
        if let (Some(kind), Some(format)) = (&kind, schema.get("format").and_then(Value::as_str))
            && gemini_format(kind, format)
            && !out.contains_key("format")
        {
            out.insert("format".into(), format.into());
        }
        Self::gemini_exclusive_bounds(schema, kind.as_deref(), &mut out);
        self.gemini_union(schema, at, &mut out, &mut nullable)?;
        if nullable {
            out.insert("nullable".into(), Value::Bool(true));
        }
        Ok(Value::Object(out))
    }

    /// `exclusiveMinimum`/`exclusiveMaximum` as Gemini's inclusive `minimum`/`maximum` (the
    /// next whole number for an integer, the bound itself for a number).
    fn gemini_exclusive_bounds(
        schema: &Map<String, Value>,
        kind: Option<&str>,
        out: &mut Map<String, Value>,
    ) {
        for (exclusive, inclusive, step) in [
            ("exclusiveMinimum", "minimum", 1.0),
            ("exclusiveMaximum", "maximum", -1.0),
        ] {
            let Some(bound) = schema.get(exclusive).and_then(Value::as_f64) else {
                continue;
            };
            let bound = if kind == Some("integer") && bound.fract() == 0.0 {
                bound + step
            } else {
                bound
            };
            let tighter = out
                .get(inclusive)
                .and_then(Value::as_f64)
                .is_none_or(|current| {
                    if step > 0.0 {
                        bound > current
                    } else {
                        bound < current
                    }
                });
            if tighter {
                let number = if bound.fract() == 0.0 && bound.abs() < 9.0e15 {
                    Number::from(bound as i64)
                } else {
                    Number::from_f64(bound).unwrap_or_else(|| Number::from(0))
                };
                out.insert(inclusive.into(), Value::Number(number));
            }
        }
    }

    /// `anyOf`/`oneOf` for Gemini: `null` branches become `nullable`, one branch left is merged
    /// into the schema, more stay an `anyOf`.
    fn gemini_union(
        &mut self,
        schema: &Map<String, Value>,
        at: &str,
        out: &mut Map<String, Value>,
        nullable: &mut bool,
    ) -> Result<(), ProviderError> {
        let unions: Vec<(&str, &Value)> = ["anyOf", "oneOf"]
            .into_iter()
            .filter_map(|key| schema.get(key).map(|value| (key, value)))
            .collect();
        let [(key, branches)] = unions.as_slice() else {
            if unions.is_empty() {
                return Ok(());
            }
            return Err(self.unsupported(
                at,
                "the schema has both `anyOf` and `oneOf`, which Gemini cannot write as one \
                 `anyOf`; simplify the type",
            ));
        };
        if out.contains_key("anyOf") {
            return Err(self.unsupported(
                at,
                format!(
                    "the schema has both a list of types and `{key}`, which Gemini cannot write \
                     as one `anyOf`; simplify the type"
                ),
            ));
        }
        let here = format!("{at}/{key}");
        let mut kept = Vec::new();
        for (i, branch) in branches.as_array().into_iter().flatten().enumerate() {
            let lowered = self.lower(branch, &format!("{here}/{i}"))?;
            let only_null = lowered.as_object().is_some_and(|b| {
                b.get("type").and_then(Value::as_str) == Some("null")
                    && b.keys()
                        .all(|k| matches!(k.as_str(), "type" | "title" | "description"))
            });
            if only_null {
                *nullable = true;
            } else if !kept.contains(&lowered) {
                kept.push(lowered);
            }
        }
        match kept.len() {
            0 => {
                if !out.contains_key("type") {
                    out.insert("type".into(), "null".into());
                    *nullable = false;
                }
            }
            1 => {
                if let Some(Value::Object(branch)) = kept.pop() {
                    if branch.get("nullable") == Some(&Value::Bool(true)) {
                        *nullable = true;
                    }
                    merge_schemas(out, &branch).map_err(|conflict| {
                        self.unsupported(
                            &here,
                            format!(
                                "the schema and its only `{key}` branch disagree on \
                                 `{conflict}`, so they cannot be merged; simplify the type"
                            ),
                        )
                    })?;
                }
            }
            _ => {
                out.insert("anyOf".into(), Value::Array(kept));
            }
        }
        Ok(())
    }

    /// The items of a tuple (`prefixItems`, or `items` as a list) as one schema: any of the
    /// item schemas (and of `items` beside `prefixItems`).
    fn tuple_items(
        &mut self,
        schema: &Map<String, Value>,
        at: &str,
    ) -> Result<Value, ProviderError> {
        let mut parts = Vec::new();
        for key in ["prefixItems", "items"] {
            match schema.get(key) {
                Some(Value::Array(items)) => {
                    for (i, item) in items.iter().enumerate() {
                        parts.push((item, format!("{at}/{key}/{i}")));
                    }
                }
                Some(rest @ Value::Object(_)) => parts.push((rest, format!("{at}/{key}"))),
                _ => {}
            }
        }
        let mut branches: Vec<Value> = Vec::new();
        for (item, item_at) in parts {
            let lowered = self.lower(item, &item_at)?;
            if !branches.contains(&lowered) {
                branches.push(lowered);
            }
        }
        match branches.len() {
            0 => Err(self.unsupported(
                at,
                "the array is an empty tuple; take no argument here instead",
            )),
            1 => Ok(branches.remove(0)),
            _ => Ok(json!({"anyOf": branches})),
        }
    }

    /// OpenAI's strict-mode parameters for the tool.
    fn strict_root(mut self) -> Result<Value, ProviderError> {
        let root = self.root;
        let mut lowered = self.lower(root, "")?;
        let Some(object) = lowered.as_object() else {
            return Err(self.unsupported("", "the input schema is not an object"));
        };
        if object.contains_key("anyOf") {
            return Err(self.unsupported(
                "",
                format!(
                    "the input schema is a union (`anyOf`/`oneOf`) at the root; strict mode needs \
                     one object of named properties at the root: put the choices in a property, \
                     {}",
                    Self::LEAVE_STRICT
                ),
            ));
        }
        if object.get("type").and_then(Value::as_str) != Some("object") {
            return Err(self.unsupported(
                "",
                format!(
                    "the input schema is not an object; strict mode needs one object of named \
                     properties at the root: take the arguments as a struct, {}",
                    Self::LEAVE_STRICT
                ),
            ));
        }
        // The targets of the references kept, until they refer to no new one.
        let mut done = BTreeSet::from(["#".to_owned()]);
        while let Some(reference) = self.kept.iter().find(|r| !done.contains(*r)).cloned() {
            done.insert(reference.clone());
            let (target, target_at) = self.resolve(&reference, "")?;
            self.expanding.push(reference.clone());
            let definition = self.lower(target, &target_at);
            self.expanding.pop();
            let definition = definition?;
            let mut tokens = target_at.splitn(3, '/').skip(1);
            if let (Some(container), Some(name), Some(object)) =
                (tokens.next(), tokens.next(), lowered.as_object_mut())
            {
                let definitions = object
                    .entry(unescape(container))
                    .or_insert_with(|| json!({}));
                if let Some(definitions) = definitions.as_object_mut() {
                    definitions.insert(unescape(name), definition);
                }
            }
        }
        Ok(lowered)
    }

    /// One schema object (no `$ref`, no `allOf`) in strict mode's subset.
    fn strict_node(
        &mut self,
        schema: &Map<String, Value>,
        at: &str,
    ) -> Result<Value, ProviderError> {
        let mut out = Map::new();
        let mut types = schema.get("type").map(type_names).unwrap_or_default();
        if types.is_empty() {
            if schema.contains_key("properties") {
                types.push("object".to_owned());
            } else if schema.contains_key("items") || schema.contains_key("prefixItems") {
                types.push("array".to_owned());
            }
        }
        for (key, value) in schema {
            let here = format!("{at}/{}", escape(key));
            match key.as_str() {
                "description" | "title" | "enum" | "const" | "pattern" | "multipleOf"
                | "minItems" | "maxItems" => {
                    out.insert(key.clone(), value.clone());
                }
                "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum"
                    if value.is_number() =>
                {
                    out.insert(key.clone(), value.clone());
                }
                "format" => {
                    if let Some(format) = value.as_str()
                        && OPENAI_FORMATS.contains(&format)
                        && types.iter().any(|t| t == "string")
                    {
                        out.insert(key.clone(), value.clone());
                    }
                }
                "not" | "if" | "then" | "else" | "dependentRequired" | "dependentSchemas"
                | "dependencies" => {
                    return Err(self.unsupported(
                        &here,
                        format!(
                            "`{key}` has no equivalent in strict mode; remove it from the \
                             schema, {}",
                            Self::LEAVE_STRICT
                        ),
                    ));
                }
                "patternProperties" if value.as_object().is_some_and(|p| !p.is_empty()) => {
                    return Err(self.free_form(&here));
                }
                "unevaluatedProperties" | "unevaluatedItems" if *value != Value::Bool(false) => {
                    return Err(self.unsupported(
                        &here,
                        format!(
                            "`{key}` other than `false` has no equivalent in strict mode; name \
                             every part, {}",
                            Self::LEAVE_STRICT
                        ),
                    ));
                }
                // Structure: below. Anything else is an annotation, or a constraint strict mode
                // does not take (the tool still checks it).
                _ => {}
            }
        }
        let unions: Vec<&str> = ["anyOf", "oneOf"]
            .into_iter()
            .filter(|key| schema.contains_key(*key))
            .collect();
        if unions.len() > 1 {
            return Err(self.unsupported(
                at,
                format!(
                    "the schema has both `anyOf` and `oneOf`, which strict mode cannot write as \
                     one `anyOf`; simplify the type, {}",
                    Self::LEAVE_STRICT
                ),
            ));
        }
        if types.is_empty()
            && unions.is_empty()
            && !out.contains_key("enum")
            && !out.contains_key("const")
        {
            return Err(self.unsupported(
                at,
                format!(
                    "the value may be any JSON (no `type`, as for a `serde_json::Value`); strict \
                     mode needs a type for every value: give this part a concrete type, {}",
                    Self::LEAVE_STRICT
                ),
            ));
        }
        if !types.is_empty() {
            out.insert("type".into(), type_value(types.clone()));
        }
        if let Some(key) = unions.first() {
            let here = format!("{at}/{key}");
            let mut branches = Vec::new();
            for (i, branch) in schema[*key].as_array().into_iter().flatten().enumerate() {
                branches.push(self.lower(branch, &format!("{here}/{i}"))?);
            }
            out.insert("anyOf".into(), Value::Array(branches));
        }
        if types.iter().any(|t| t == "object") {
            self.strict_object(schema, at, &mut out)?;
        }
        if types.iter().any(|t| t == "array") {
            let items = match (schema.get("items"), schema.get("prefixItems")) {
                (Some(items @ (Value::Object(_) | Value::Bool(_))), None) => {
                    self.lower(items, &format!("{at}/items"))?
                }
                (Some(_), _) | (None, Some(_)) => self.tuple_items(schema, at)?,
                (None, None) => {
                    return Err(self.unsupported(
                        at,
                        format!(
                            "the array's items may be any JSON (no `items`); strict mode needs \
                             a type for every value: give the items a type, {}",
                            Self::LEAVE_STRICT
                        ),
                    ));
                }
            };
            out.insert("items".into(), items);
        }
        Ok(Value::Object(out))
    }

    fn free_form(&self, at: &str) -> ProviderError {
        self.unsupported(
            at,
            format!(
                "the object takes keys that its `properties` do not name (a map, or a free-form \
                 object); strict mode needs every key named: take a struct with named fields \
                 here, {}",
                Self::LEAVE_STRICT
            ),
        )
    }

    /// An object's properties in strict mode: all required, the optional ones nullable, no
    /// other keys.
    fn strict_object(
        &mut self,
        schema: &Map<String, Value>,
        at: &str,
        out: &mut Map<String, Value>,
    ) -> Result<(), ProviderError> {
        if let Some(extra) = schema.get("additionalProperties")
            && *extra != Value::Bool(false)
        {
            return Err(self.free_form(&format!("{at}/additionalProperties")));
        }
        let mut properties = Map::new();
        let mut names = Vec::new();
        for (name, property) in schema
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let lowered = self.lower(property, &format!("{at}/properties/{}", escape(name)))?;
            // Required now, but never made nullable here: an optional property that accepts
            // `null` (an `Option`) is nullable already, and adding `null` to one that does not
            // would let the model send what the tool's own schema refuses.
            properties.insert(name.clone(), lowered);
            names.push(Value::String(name.clone()));
        }
        out.insert("properties".into(), Value::Object(properties));
        out.insert("required".into(), Value::Array(names));
        out.insert("additionalProperties".into(), Value::Bool(false));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn definition(name: &str, input_schema: Value) -> LlmToolDefinition {
        LlmToolDefinition {
            name: name.into(),
            description: format!("The {name} tool"),
            input_schema,
            ..Default::default()
        }
    }

    fn definitions() -> Vec<LlmToolDefinition> {
        vec![LlmToolDefinition {
            name: "greet".into(),
            description: "Greets".into(),
            input_schema: json!({"$schema": "x", "type": "object",
                "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            ..Default::default()
        }]
    }

    /// Gemini's parameters for one tool with `schema`.
    fn gemini(schema: Value) -> Result<Value, ProviderError> {
        let json = provider_json(&[definition("t", schema)], ProviderFormat::Gemini)?;
        Ok(json["functionDeclarations"][0]["parameters"].clone())
    }

    /// OpenAI's strict parameters for one tool with `schema`.
    fn strict(schema: Value) -> Result<Value, ProviderError> {
        let json = provider_json_with(
            &[definition("t", schema)],
            ProviderFormat::OpenAi,
            &ProviderOptions::default().strict(true),
        )?;
        assert_eq!(json[0]["function"]["strict"], true);
        Ok(json[0]["function"]["parameters"].clone())
    }

    fn ok(result: Result<Value, ProviderError>) -> Value {
        result.unwrap_or_else(|e| panic!("{e}"))
    }

    fn err(result: Result<Value, ProviderError>) -> ProviderError {
        match result {
            Ok(value) => panic!("expected an error, got {value}"),
            Err(e) => e,
        }
    }

    #[test]
    fn shapes_follow_each_provider() {
        let defs = definitions();
        let parameters = json!({"type": "object", "properties": {"name": {"type": "string"}},
            "required": ["name"]});
        assert_eq!(
            ok(provider_json(&defs, ProviderFormat::OpenAi)),
            json!([{"type": "function", "function": {"name": "greet", "description": "Greets",
                "parameters": parameters}}])
        );
        assert_eq!(
            ok(provider_json(&defs, ProviderFormat::Anthropic)),
            json!([{"name": "greet", "description": "Greets", "input_schema": parameters}])
        );
        assert_eq!(
            ok(provider_json(&defs, ProviderFormat::Gemini))["functionDeclarations"][0]["parameters"],
            parameters
        );
        assert_eq!(
            ok(provider_json(&defs, ProviderFormat::Mcp))["tools"][0]["inputSchema"],
            defs[0].input_schema
        );
        assert!("OpenAI".parse::<ProviderFormat>().is_ok());
        assert!("claude".parse::<ProviderFormat>().is_err());
        for format in ["openai", "anthropic", "gemini", "mcp"] {
            let parsed: ProviderFormat = format.parse().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(parsed.to_string(), format);
        }
    }

    #[test]
    fn anthropic_and_mcp_keep_the_full_schema() {
        let schema = json!({"$schema": "s", "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A"}, "b": {"type": ["string", "null"]}},
            "$defs": {"A": {"type": "object", "additionalProperties": true}}});
        let defs = [definition("t", schema.clone())];
        let mut without = schema.clone();
        without.as_object_mut().map(|o| o.remove("$schema"));
        assert_eq!(
            ok(provider_json(&defs, ProviderFormat::Anthropic))[0]["input_schema"],
            without
        );
        assert_eq!(
            ok(provider_json(&defs, ProviderFormat::OpenAi))[0]["function"]["parameters"],
            without
        );
        assert_eq!(
            ok(provider_json(&defs, ProviderFormat::Mcp))["tools"][0]["inputSchema"],
            schema
        );
    }

    #[test]
    fn gemini_inlines_references() {
        let parameters = ok(gemini(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "style": {"$ref": "#/$defs/Style", "description": "How"},
                "list": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
            },
            "required": ["style"],
            "$defs": {
                "Style": {"type": "object", "description": "A style",
                    "properties": {"item": {"$ref": "#/$defs/Item"}},
                    "additionalProperties": false},
                "Item": {"type": "string", "title": "Item"},
            },
        })));
        assert_eq!(
            parameters,
            json!({"type": "object", "required": ["style"], "properties": {
                "style": {"type": "object", "description": "How",
                    "properties": {"item": {"type": "string", "title": "Item"}}},
                "list": {"type": "array", "items": {"type": "string", "title": "Item"}},
            }})
        );
        // Draft-07 `definitions`, and references to references.
        let parameters = ok(gemini(json!({
            "type": "object",
            "properties": {"a": {"$ref": "#/definitions/A"}},
            "definitions": {"A": {"$ref": "#/definitions/B"}, "B": {"type": "integer"}},
        })));
        assert_eq!(
            parameters,
            json!({"type": "object", "properties": {"a": {"type": "integer"}}})
        );
    }

    #[test]
    fn gemini_turns_null_types_into_nullable() {
        let parameters = ok(gemini(json!({"type": "object", "properties": {
            "limit": {"type": ["integer", "null"], "format": "uint", "minimum": 0},
            "prefix": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "P"},
            "inner": {"anyOf": [{"$ref": "#/$defs/In"}, {"type": "null"}]},
            "mixed": {"type": ["string", "integer"], "maxLength": 3, "maximum": 9},
        }, "$defs": {"In": {"type": "object", "properties": {"x": {"type": "boolean"}}}}})));
        assert_eq!(
            parameters["properties"],
            json!({
                "limit": {"type": "integer", "minimum": 0, "nullable": true},
                "prefix": {"type": "string", "description": "P", "nullable": true},
                "inner": {"type": "object", "properties": {"x": {"type": "boolean"}},
                    "nullable": true},
                "mixed": {"anyOf": [{"type": "string", "maxLength": 3},
                    {"type": "integer", "maximum": 9}]},
            })
        );
    }

    #[test]
    fn gemini_lowers_constants_unions_and_formats() {
        let parameters = ok(gemini(json!({"type": "object", "properties": {
            "case": {"oneOf": [
                {"const": "upper", "type": "string", "description": "UP"},
                {"const": "lower", "type": "string", "description": "low"},
            ]},
            "level": {"type": "integer", "enum": [1, 2], "format": "int32"},
            "x": {"type": "number", "format": "double", "exclusiveMinimum": 0.5},
            "n": {"type": "integer", "format": "uint64", "exclusiveMaximum": 10},
            "when": {"type": "string", "format": "date-time"},
            "mail": {"type": "string", "format": "email", "uniqueItems": true},
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                "minItems": 2, "maxItems": 2},
            "both": {"allOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}]},
        }, "additionalProperties": false, "$defs": {
            "A": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            "B": {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]},
        }})));
        assert!(parameters.get("additionalProperties").is_none());
        let p = &parameters["properties"];
        assert_eq!(
            p["case"],
            json!({"anyOf": [
                {"type": "string", "enum": ["upper"], "description": "UP"},
                {"type": "string", "enum": ["lower"], "description": "low"},
            ]})
        );
        assert_eq!(
            p["level"],
            json!({"type": "integer", "enum": ["1", "2"], "format": "enum"})
        );
        assert_eq!(
            p["x"],
            json!({"type": "number", "format": "double", "minimum": 0.5})
        );
        assert_eq!(p["n"], json!({"type": "integer", "maximum": 9}));
        assert_eq!(p["when"], json!({"type": "string", "format": "date-time"}));
        assert_eq!(p["mail"], json!({"type": "string"}));
        assert_eq!(
            p["pair"],
            json!({"type": "array", "minItems": 2, "maxItems": 2,
                "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}})
        );
        assert_eq!(
            p["both"],
            json!({"type": "object", "required": ["a", "b"],
                "properties": {"a": {"type": "string"}, "b": {"type": "string"}}})
        );
    }

    #[test]
    fn gemini_declares_no_parameters_for_a_tool_without_any() {
        let json = ok(provider_json(
            &[definition(
                "peek",
                json!({"$schema": "s", "title": "PeekArgs", "type": "object"}),
            )],
            ProviderFormat::Gemini,
        ));
        assert_eq!(
            json,
            json!({"functionDeclarations": [{"name": "peek", "description": "The peek tool"}]})
        );
    }

    #[test]
    fn gemini_refuses_a_recursive_type() {
        let error = err(gemini(json!({"type": "object", "properties": {
            "tree": {"$ref": "#/$defs/Node"},
        }, "$defs": {"Node": {"type": "object", "properties": {
            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
        }}}})));
        assert_eq!(error.tool(), Some("t"));
        assert_eq!(
            error.pointer(),
            Some("/$defs/Node/properties/children/items/$ref")
        );
        let message = error.to_string();
        assert!(
            message.contains("tool 't'")
                && message.contains("recursive")
                && message.contains("#/$defs/Node"),
            "{message}"
        );
        assert!(matches!(error, ProviderError::Recursive { .. }));
        // The root referring to itself, and through `allOf`.
        let error = err(gemini(json!({"type": "object", "properties": {
            "again": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}})));
        assert!(matches!(error, ProviderError::Recursive { .. }), "{error}");
        let error = err(gemini(
            json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}},
            "$defs": {"A": {"allOf": [{"$ref": "#/$defs/A"}]}}}),
        ));
        assert!(matches!(error, ProviderError::Recursive { .. }), "{error}");
    }

    #[test]
    fn strict_requires_every_property_and_keeps_nullable_only_what_accepts_null() {
        let parameters = ok(strict(json!({
            "$schema": "s", "title": "Args", "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1},
                "limit": {"type": ["integer", "null"], "format": "uint", "minimum": 0},
                "flag": {"type": "boolean", "default": false},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "one": {"const": "x", "type": "string"},
                "words": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
            },
            "required": ["query", "flag"],
        })));
        assert_eq!(
            parameters,
            json!({"title": "Args", "type": "object", "additionalProperties": false,
            "required": ["flag", "limit", "mode", "one", "query", "words"],
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": ["integer", "null"], "minimum": 0},
                // Optional without accepting `null`: required, not made nullable (the tool's
                // own schema would refuse `null`).
                "flag": {"type": "boolean"},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "one": {"type": "string", "const": "x"},
                "words": {"type": "array", "items": {"type": "string"}},
            }})
        );
    }

    #[test]
    fn strict_closes_nested_objects_and_keeps_references() {
        let parameters = ok(strict(json!({
            "type": "object",
            "properties": {
                "style": {"$ref": "#/$defs/Style", "description": "How"},
                "maybe": {"anyOf": [{"$ref": "#/$defs/Style"}, {"type": "null"}]},
                "tree": {"$ref": "#/$defs/Node"},
                "case": {"oneOf": [{"const": "up", "type": "string"}, {"const": "down", "type": "string"}]},
            },
            "required": ["style", "maybe", "tree", "case"],
            "$defs": {
                "Style": {"type": "object", "properties": {"sep": {"type": "string"},
                    "upper": {"type": "boolean", "default": false}}, "required": ["sep"]},
                "Node": {"type": "object", "properties": {
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
                    "required": ["children"]},
                "Unused": {"type": "object", "additionalProperties": true},
            },
        })));
        let style = json!({"type": "object", "additionalProperties": false,
            "required": ["sep", "upper"], "properties": {"sep": {"type": "string"},
            "upper": {"type": "boolean"}}});
        let mut described = style.clone();
        described["description"] = "How".into();
        assert_eq!(parameters["properties"]["style"], described);
        assert_eq!(
            parameters["properties"]["maybe"],
            json!({"anyOf": [{"$ref": "#/$defs/Style"}, {"type": "null"}]})
        );
        assert_eq!(
            parameters["properties"]["tree"],
            json!({"$ref": "#/$defs/Node"})
        );
        assert_eq!(
            parameters["properties"]["case"],
            json!({"anyOf": [{"const": "up", "type": "string"}, {"const": "down", "type": "string"}]})
        );
        assert_eq!(
            parameters["$defs"],
            json!({"Style": style, "Node": {"type": "object", "additionalProperties": false,
                "required": ["children"], "properties": {"children": {"type": "array",
                "items": {"$ref": "#/$defs/Node"}}}}}),
            "only the definitions still referred to, each strict"
        );
    }

    #[test]
    fn strict_gives_a_tool_without_arguments_an_empty_closed_object() {
        assert_eq!(
            ok(strict(json!({"title": "PeekArgs", "type": "object"}))),
            json!({"title": "PeekArgs", "type": "object", "properties": {}, "required": [],
                "additionalProperties": false})
        );
    }

    #[test]
    fn strict_refuses_free_form_values_with_their_pointer() {
        let cases = [
            (
                json!({"type": "object", "properties": {"meta": {"type": "object",
                    "additionalProperties": {"type": "string"}}}}),
                "/properties/meta/additionalProperties",
                "keys",
            ),
            (
                json!({"type": "object", "properties": {"any": true}}),
                "/properties/any",
                "any JSON",
            ),
            (
                json!({"type": "object", "properties": {"any": {"description": "x"}}}),
                "/properties/any",
                "any JSON",
            ),
            (
                json!({"type": "object", "properties": {"list": {"type": "array"}}}),
                "/properties/list",
                "items",
            ),
            (
                json!({"type": "object", "properties": {"v": {"$ref": "#/$defs/V"}},
                    "$defs": {"V": {}}}),
                "/$defs/V",
                "any JSON",
            ),
            (
                json!({"type": "object", "properties": {"n": {"type": "integer",
                    "not": {"const": 3}}}}),
                "/properties/n/not",
                "`not`",
            ),
            (
                json!({"type": "object", "additionalProperties": true}),
                "/additionalProperties",
                "keys",
            ),
            (
                json!({"anyOf": [{"type": "object"}, {"type": "object"}]}),
                "",
                "root",
            ),
        ];
        for (schema, pointer, why) in cases {
            let error = err(strict(schema.clone()));
            assert_eq!(error.tool(), Some("t"), "{schema}");
            assert_eq!(error.pointer(), Some(pointer), "{schema}: {error}");
            let message = error.to_string();
            assert!(
                message.contains("tool 't'")
                    && message.contains("strict mode")
                    && message.contains(why),
                "{message}"
            );
        }
    }

    #[test]
    fn strict_is_for_openai_only() {
        for format in [
            ProviderFormat::Anthropic,
            ProviderFormat::Gemini,
            ProviderFormat::Mcp,
        ] {
            let error = err(provider_json_with(
                &definitions(),
                format,
                &ProviderOptions::default().strict(true),
            ));
            assert_eq!(error, ProviderError::StrictNeedsOpenAi { format });
            assert_eq!(error.tool(), None);
            assert!(error.to_string().contains("openai"), "{error}");
        }
        let json = ok(provider_json_with(
            &definitions(),
            ProviderFormat::OpenAi,
            &ProviderOptions::default(),
        ));
        assert!(json[0]["function"].get("strict").is_none());
    }

    #[test]
    fn inlining_is_bounded() {
        // Each definition refers twice to the next: 2^40 nodes if inlined naively.
        let mut defs = Map::new();
        for i in 0..40 {
            let next = json!({"$ref": format!("#/$defs/D{}", i + 1)});
            defs.insert(
                format!("D{i}"),
                json!({"type": "object", "properties": {"a": next, "b": next}}),
            );
        }
        defs.insert("D40".into(), json!({"type": "string"}));
        let schema = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/D0"}},
            "$defs": defs});
        let error = err(gemini(schema));
        assert!(error.to_string().contains("larger than"), "{error}");
    }
}
