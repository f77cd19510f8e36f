//! Tools whose calls run as tasks (MCP's tasks extension): the client is handed a task and
//! asks for the result later, while the call goes on.
//!
//! A tool declares it with `#[tool(task = "optional")]` (or `"required"`). Its call becomes a
//! task once its input is read, before the tool's code runs. A tool marked
//! `#[tool(task = "required", manual_start)]` says when, with [`start`]: until then it runs
//! inside the client's request, so the questions it asks first (an elicitation, say) are
//! asked there, and on MCP revision 2026-07-28 answered in the rounds of the request itself;
//! the questions it asks after are the task's input requests.
//!
//! ```
//! use llm_worker_guest::{Elicitation, QuestionError, elicit, task, tool, tool_registry};
//!
//! /// Whose report to build.
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Who {
//!     /// Their name.
//!     name: String,
//! }
//!
//! #[derive(Clone, Default)]
//! struct Reports;
//!
//! #[tool_registry]
//! impl Reports {
//!     /// Builds the yearly report of the user the client names.
//!     #[tool(task = "required", manual_start)]
//!     async fn yearly_report(&self) -> Result<String, QuestionError> {
//!         let Elicitation::Accept(who) = elicit::<Who>("user", "Whose report?").await? else {
//!             return Ok("no report: nobody was named".into());
//!         };
//!         // What follows takes minutes: the client gets the task now.
//!         task::start();
//!         Ok(format!("the yearly report of {}", who.name))
//!     }
//! }
//! # fn main() {}
//! ```

/// The call running now becomes a task, if it runs as one and has not yet: the client is
/// answered with the task, and the call goes on. Calling it again, in a tool without task
/// support, or when the client cannot take tasks does nothing. Natively (in unit tests) it
/// does nothing.
pub fn start() {
    #[cfg(target_arch = "wasm32")]
    crate::export::bindings::llm_worker::tool::host::start_task();
}
