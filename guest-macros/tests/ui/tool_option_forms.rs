use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[tool(read_only(yes), title, destructive = 1, open_world)]
    fn find(&self) -> String {
        String::new()
    }

    #[tool = "find"]
    fn other(&self) -> String {
        String::new()
    }
}

fn main() {}
