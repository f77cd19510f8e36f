use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[tool(name = "other", read_only = "yes", title = 5)]
    fn find(&self) -> String {
        String::new()
    }

    #[tool(task = "sometimes")]
    fn later(&self) -> String {
        String::new()
    }

    #[tool(manual_start)]
    fn never_a_task(&self) -> String {
        String::new()
    }
}

fn main() {}
