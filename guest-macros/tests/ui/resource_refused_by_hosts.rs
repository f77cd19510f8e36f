use llm_worker_guest::{resource, tool_registry};

#[derive(Clone, Default)]
struct App;

// What the host would refuse at load does not build.
#[tool_registry]
impl App {
    #[resource(uri = "my notes:x")]
    fn a(&self) -> String {
        String::new()
    }

    #[resource(uri = "notes://today", mime_type = "text/mark down")]
    fn b(&self) -> String {
        String::new()
    }

    #[resource(template = "my notes:{id}")]
    fn c(&self, id: String) -> String {
        id
    }
}

fn main() {}
