use llm_worker_guest::{resource, tool_registry};

#[derive(Clone, Default)]
struct App;

#[tool_registry]
impl App {
    #[resource(uri = "notes://{id}", mime = "text/plain")]
    fn a(&self) -> String {
        String::new()
    }

    #[resource(template = "notes://{+path}", mime_type = "markdown")]
    fn b(&self, path: String) -> String {
        path
    }

    #[resource(uri = "today", name = "")]
    fn c(&self) -> String {
        String::new()
    }
}

fn main() {}
