use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[tool]
    fn find(&self, query: &str, ids: &[u32]) -> String {
        format!("{query}{ids:?}")
    }
}

fn main() {}
