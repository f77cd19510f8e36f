use llm_worker_guest::{tool, tool_registry};

#[derive(Clone)]
struct App;

#[tool_registry]
impl App {
    /// Two names a parser ignoring case takes for one.
    #[tool]
    #[allow(non_snake_case)]
    fn find(&self, id: String, ID: String) -> String {
        format!("{id}{ID}")
    }

    /// The same, through full case folding.
    #[tool]
    fn road(&self, straße: String, strasse: String) -> String {
        format!("{straße}{strasse}")
    }
}

fn main() {}
