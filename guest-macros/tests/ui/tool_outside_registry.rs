use llm_worker_guest::tool;

#[derive(Clone)]
struct App;

impl App {
    #[tool]
    fn lonely(&self) -> String {
        String::new()
    }
}

fn main() {}
