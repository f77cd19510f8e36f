//! What a plugin's prompts must be, and the cap on the values one completion carries.
//!
//! A prompt's name and each argument's name follow the rule for tool names
//! ([`check_name`], re-exported here); titles follow [`crate::tool::check_title`]. The macros
//! check them at compile time and the host at load.

pub use crate::tool::{NameProblem, check_name};

/// Most prompts one plugin may offer.
pub const MAX_PROMPTS: usize = 256;

/// Most arguments one prompt may have.
pub const MAX_PROMPT_ARGUMENTS: usize = 64;

/// Most values one completion (of a prompt argument or a template variable) carries; the
/// guest SDK and the host cut a longer list and say there are more.
pub const MAX_COMPLETION_VALUES: usize = 100;
