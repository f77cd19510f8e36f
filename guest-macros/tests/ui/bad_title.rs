use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[tool(title = "")]
    fn a(&self) -> String {
        String::new()
    }

    #[tool(title = "Two
lines")]
    fn b(&self) -> String {
        String::new()
    }
}

fn main() {}
