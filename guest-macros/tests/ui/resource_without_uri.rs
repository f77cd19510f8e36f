use llm_worker_guest::{resource, tool_registry};

#[derive(Clone, Default)]
struct App;

#[tool_registry]
impl App {
    /// Today's notes.
    #[resource]
    fn today(&self) -> String {
        String::new()
    }

    #[resource(name = "yesterday")]
    fn yesterday(&self) -> String {
        String::new()
    }

    #[resource(uri = "notes://a", template = "notes://{id}")]
    fn both(&self) -> String {
        String::new()
    }
}

fn main() {}
