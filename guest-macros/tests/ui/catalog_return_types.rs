use llm_worker_guest::{prompt, resource, tool_registry};

#[derive(Clone, Default)]
struct App;

#[tool_registry]
impl App {
    #[resource(uri = "notes://count")]
    fn count(&self) -> u32 {
        3
    }

    #[prompt]
    fn ask(&self) -> Result<u32, String> {
        Ok(3)
    }
}

fn main() {}
