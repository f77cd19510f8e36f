//! Notes: two tools sharing one list, as methods of one impl share `self`.

use std::sync::{Arc, Mutex};

use llm_worker_guest::{tool, tool_registry};

/// A notebook shared by its tools.
#[derive(Clone, Default)]
pub struct Notes {
    notes: Arc<Mutex<Vec<String>>>,
}

#[tool_registry]
impl Notes {
    /// Adds a note. Returns how many notes there are now.
    #[tool]
    fn add_note(&self, #[description = "The note's text"] text: String) -> Result<String, String> {
        if text.trim().is_empty() {
            return Err("the note is empty; give some text".into());
        }
        let mut notes = self.notes.lock().map_err(|_| "the notebook is broken")?;
        notes.push(text);
        Ok(notes.len().to_string())
    }

    /// Lists every note added in this session, one per line, oldest first.
    #[tool]
    fn list_notes(&self) -> Result<String, String> {
        let notes = self.notes.lock().map_err(|_| "the notebook is broken")?;
        Ok(notes.join("\n"))
    }
}

llm_worker_guest::export_plugin!(Notes);
