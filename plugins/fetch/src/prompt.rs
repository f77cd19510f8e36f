//! The `fetch` prompt: a page a user asked for, fetched with the manual user agent and without
//! robots.txt, its failure told as the prompt's text (as the original does).

use llm_worker_guest::{prompt, tool_registry};

/// The prompt, in a registry of its own: its name is the tool's.
#[derive(Clone, Default)]
pub struct FetchPrompt;

#[tool_registry]
impl FetchPrompt {
    /// Fetch a URL and extract its contents as markdown
    #[prompt]
    async fn fetch(&self, #[description = "URL to fetch"] url: String) -> String {
        let settings = super::Settings::from_env();
        let fetched = match super::parse(&url) {
            Ok(page_url) => {
                let limit = settings.limit();
                let agent = &settings.user_agent_manual;
                super::fetch_url(&page_url, agent, false, None, &limit).await
            }
            Err(error) => Err(error),
        };
        match fetched {
            Ok((content, prefix)) => bounded(&prefix, &content),
            Err(error) => error,
        }
    }
}

/// The prompt's text: the page whole, as the original gives it, unless it is longer than an
/// answer may be (the host refuses a prompt over its output limit, which would lose the whole
/// page): then cut there, saying where the fetch tool takes up the rest.
fn bounded(prefix: &str, content: &str) -> String {
    let room = super::MAX_ANSWER_BYTES.saturating_sub(prefix.len());
    if content.len() <= room {
        return format!("{prefix}{content}");
    }
    let kept = &content[..content.floor_char_boundary(room)];
    let next = kept.chars().count();
    format!(
        "{prefix}{kept}\n\n<error>Content truncated: the page is longer than a prompt can carry. \
         Call the fetch tool with a start_index of {next} to get more content.</error>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_longer_than_an_answer_is_cut_saying_where_the_rest_is() {
        assert_eq!(bounded("Contents:\n", "short"), "Contents:\nshort");
        let long = "é".repeat(super::super::MAX_ANSWER_BYTES);
        let text = bounded("Contents:\n", &long);
        assert!(
            text.len() < super::super::MAX_ANSWER_BYTES + 200,
            "{}",
            text.len()
        );
        let kept = (super::super::MAX_ANSWER_BYTES - "Contents:\n".len()) / 2;
        assert!(
            text.ends_with(&format!(
                "start_index of {kept} to get more content.</error>"
            )),
            "{}",
            &text[text.len() - 120..]
        );
    }
}
