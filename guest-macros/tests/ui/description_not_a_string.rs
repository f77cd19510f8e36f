use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[tool]
    fn size(&self, #[description = 42] n: u32) -> u32 {
        n
    }
}

fn main() {}
