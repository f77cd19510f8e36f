use llm_worker_guest::tool_registry;

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    fn helper(&self) {}
}

fn main() {}
