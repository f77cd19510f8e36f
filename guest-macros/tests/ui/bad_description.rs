use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    /// Reads a file,
    #[doc = "which \u{1b}[2J clears the screen."]
    #[tool]
    fn b(&self) -> String {
        String::new()
    }

    /// Reads a file, \u{202e}backwards.
    #[doc(alias = "read")]
    #[doc = "with an override: \u{202e}"]
    #[tool]
    fn d(&self) -> String {
        String::new()
    }

    /// Fine.
    #[tool]
    fn c(&self, #[description = "Who\u{E0041}"] name: String) -> String {
        name
    }
}

fn main() {}
