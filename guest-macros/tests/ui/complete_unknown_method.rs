use llm_worker_guest::{complete, prompt, tool_registry};

#[derive(Clone, Default)]
struct App;

#[tool_registry]
impl App {
    #[prompt]
    fn ask(&self, #[complete(topics)] topic: String) -> String {
        topic
    }
}

fn main() {}
