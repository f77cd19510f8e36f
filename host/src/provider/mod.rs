//! Tool definitions in the JSON shapes of LLM providers and of MCP; see [`provider_json_with`]
//! for how each format's schema dialect is written.
//!
//! The rooms: this file (formats, options, errors and the shapes around the schemas), `lower`
//! (the walk every dialect shares), `gemini` and `strict` (what each dialect makes of a node).

mod gemini;
mod lower;
mod strict;
#[cfg(test)]
mod tests;

use std::fmt;

use serde_json::{Value, json};

use self::lower::Lowering;

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
    // Only the formats that inline references weigh what they were given.
    let inlines = options.strict || format == ProviderFormat::Gemini;
    let budget = lower::Budget::for_schemas(
        definitions
            .iter()
            .filter(|_| inlines)
            .map(|d| &d.input_schema),
    );
    Ok(match format {
        ProviderFormat::OpenAi => Value::Array(
            each.map(|d| {
                let mut function = json!({"name": d.name, "description": d.description});
                if options.strict {
                    function["parameters"] =
                        Lowering::new(&d.name, &d.input_schema, format, true, &budget)
                            .strict_root()?;
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
                    Lowering::new(&d.name, &d.input_schema, format, false, &budget).gemini_root()?
                {
                    declaration["parameters"] = parameters;
                }
                Ok(declaration)
            })
            .collect::<Result<Vec<_>, ProviderError>>()?}),
        ProviderFormat::Mcp => json!({"tools": each.map(mcp_tool).collect::<Vec<_>>()}),
    })
}

/// One tool as MCP's `tools/list` gives it: the one home of that shape, printed by
/// `schema --format mcp` and served by the MCP server alike. The title is given twice, as MCP
/// asks (`title`, and `annotations.title` for clients of revision 2025-03-26); the behaviour
/// hints are those the host vouches for.
pub(crate) fn mcp_tool(definition: &LlmToolDefinition) -> Value {
    let mut tool = json!({
        "name": definition.name,
        "description": definition.description,
        "inputSchema": definition.input_schema,
    });
    if let Some(title) = &definition.title {
        tool["title"] = json!(title);
    }
    if let Some(output) = &definition.output_schema {
        tool["outputSchema"] = output.clone();
    }
    let hints = &definition.annotations;
    if definition.title.is_some() || !hints.is_empty() {
        let mut annotations = json!(hints);
        if let Some(title) = &definition.title {
            annotations["title"] = json!(title);
        }
        tool["annotations"] = annotations;
    }
    tool
}
