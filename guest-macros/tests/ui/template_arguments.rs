use llm_worker_guest::{resource, tool_registry};

#[derive(Clone, Default)]
struct App;

#[tool_registry]
impl App {
    /// A page of a note.
    #[resource(template = "notes://{id}/{page}")]
    fn page(&self, id: String) -> String {
        id
    }

    #[resource(template = "notes://{id}")]
    fn typed(&self, id: u32, extra: String) -> String {
        format!("{id}{extra}")
    }

    #[resource(uri = "notes://fixed")]
    fn fixed(&self, id: String) -> String {
        id
    }
}

fn main() {}
