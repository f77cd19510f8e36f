use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    #[tool]
    fn grüßen(&self) -> String {
        String::new()
    }

    #[tool]
    fn a_tool_name_that_is_far_too_long_for_any_host_to_accept_as_a_name_ok(&self) -> String {
        String::new()
    }
}

fn main() {}
