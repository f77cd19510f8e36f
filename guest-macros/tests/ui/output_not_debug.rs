use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

struct Opaque;

#[tool_registry]
impl App {
    #[tool]
    fn find(&self) -> Opaque {
        Opaque
    }
}

fn main() {}
