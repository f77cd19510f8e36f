use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

trait Greeter {
    fn greet(&self) -> String;
}

#[tool_registry]
impl Greeter for App {
    #[tool]
    fn greet(&self) -> String {
        String::new()
    }
}

fn main() {}
