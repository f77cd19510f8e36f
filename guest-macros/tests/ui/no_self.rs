use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[tool]
    fn associated(x: u32) -> u32 {
        x
    }
}

fn main() {}
