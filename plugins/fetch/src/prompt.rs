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
    fn fetch(&self, #[description = "URL to fetch"] url: String) -> String {
        let settings = super::Settings::from_env();
        let fetched = super::parse(&url).and_then(|page_url| {
            let limit = settings.limit();
            super::fetch_url(&page_url, &settings.user_agent_manual, false, None, &limit)
        });
        match fetched {
            Ok((content, prefix)) => prefix + &content,
            Err(error) => error,
        }
    }
}
