//! Tool definitions in the JSON shapes of LLM providers and of MCP.

use serde_json::{Value, json};

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

/// The schema without `$schema` (providers do not want it).
fn parameters(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
    }
    schema
}

/// `definitions` (already sorted by name) in `format`'s shape.
pub fn provider_json(definitions: &[LlmToolDefinition], format: ProviderFormat) -> Value {
    let each = definitions.iter();
    match format {
        ProviderFormat::OpenAi => each
            .map(|d| {
                json!({"type": "function", "function": {
                    "name": d.name, "description": d.description,
                    "parameters": parameters(&d.input_schema)}})
            })
            .collect(),
        ProviderFormat::Anthropic => each
            .map(|d| {
                json!({"name": d.name, "description": d.description,
                    "input_schema": parameters(&d.input_schema)})
            })
            .collect(),
        ProviderFormat::Gemini => json!({"functionDeclarations": each
            .map(|d| json!({"name": d.name, "description": d.description,
                "parameters": parameters(&d.input_schema)}))
            .collect::<Vec<_>>()}),
        ProviderFormat::Mcp => json!({"tools": each
            .map(|d| json!({"name": d.name, "description": d.description,
                "inputSchema": d.input_schema}))
            .collect::<Vec<_>>()}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn definitions() -> Vec<LlmToolDefinition> {
        vec![LlmToolDefinition {
            name: "greet".into(),
            description: "Greets".into(),
            input_schema: json!({"$schema": "x", "type": "object"}),
        }]
    }

    #[test]
    fn shapes_follow_each_provider() {
        let defs = definitions();
        assert_eq!(
            provider_json(&defs, ProviderFormat::OpenAi),
            json!([{"type": "function", "function": {"name": "greet", "description": "Greets",
                "parameters": {"type": "object"}}}])
        );
        assert_eq!(
            provider_json(&defs, ProviderFormat::Anthropic),
            json!([{"name": "greet", "description": "Greets", "input_schema": {"type": "object"}}])
        );
        assert_eq!(
            provider_json(&defs, ProviderFormat::Gemini)["functionDeclarations"][0]["parameters"],
            json!({"type": "object"})
        );
        assert_eq!(
            provider_json(&defs, ProviderFormat::Mcp)["tools"][0]["inputSchema"]["type"],
            "object"
        );
        assert!("OpenAI".parse::<ProviderFormat>().is_ok());
        assert!("claude".parse::<ProviderFormat>().is_err());
    }
}
