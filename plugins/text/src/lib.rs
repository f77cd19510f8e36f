//! Text tools: several arguments, `Option`, `Vec` and a nested struct.

use llm_worker_guest::{tool, tool_registry};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Text tools.
#[derive(Clone, Default)]
pub struct Text;

/// How to join words.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct JoinStyle {
    /// Put between the words.
    pub separator: String,
    /// Upper-case the result.
    #[serde(default)]
    pub uppercase: bool,
}

/// What `stats` counts: a structured result, with its output schema.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Stats {
    /// Words (separated by whitespace).
    pub words: usize,
    /// Characters (Unicode scalar values).
    pub chars: usize,
}

/// Which case to convert to.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Case {
    /// UPPER CASE
    Upper,
    /// lower case
    Lower,
}

#[tool_registry]
impl Text {
    /// Joins words with a style. Returns the joined text.
    #[tool]
    fn join(
        &self,
        #[description = "The words to join"] words: Vec<String>,
        #[description = "How to join them"] style: JoinStyle,
        #[description = "Text to put before the result, if any"] prefix: Option<String>,
    ) -> Result<String, String> {
        let joined = words.join(&style.separator);
        let joined = if style.uppercase {
            joined.to_uppercase()
        } else {
            joined
        };
        Ok(format!("{}{joined}", prefix.unwrap_or_default()))
    }

    /// Counts the words and characters of a text.
    #[tool(title = "Text statistics", read_only, idempotent)]
    fn stats(&self, #[description = "The text"] text: String) -> Stats {
        Stats {
            words: text.split_whitespace().count(),
            chars: text.chars().count(),
        }
    }

    /// Converts a text to upper or lower case.
    #[tool]
    fn convert_case(
        &self,
        #[description = "The text"] text: String,
        #[description = "The case"] case: Case,
    ) -> Result<String, String> {
        Ok(match case {
            Case::Upper => text.to_uppercase(),
            Case::Lower => text.to_lowercase(),
        })
    }
}

llm_worker_guest::export_plugin!(Text);
