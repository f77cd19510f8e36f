use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[tool]
    fn get_x(&self) -> String {
        String::new()
    }

    #[tool]
    fn get__x(&self) -> String {
        String::new()
    }
}

fn main() {}
