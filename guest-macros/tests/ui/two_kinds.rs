use llm_worker_guest::{prompt, tool, tool_registry};

#[derive(Clone, Default)]
struct App;

#[tool_registry]
impl App {
    #[tool]
    #[prompt]
    fn ask(&self, topic: String) -> String {
        topic
    }
}

fn main() {}
