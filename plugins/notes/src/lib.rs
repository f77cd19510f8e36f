//! Notes: two tools sharing one list, as methods of one impl share `self`; the list is also
//! a resource (and each note one, by number), and a prompt asks the model to review them.

use std::sync::{Arc, Mutex};

use llm_worker_guest::{
    RequestError, complete, prompt, resource, resource_updated, tool, tool_registry,
};

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
        resource_updated("notes://all");
        Ok(notes.len().to_string())
    }

    /// Lists every note added in this session, one per line, oldest first.
    #[tool]
    fn list_notes(&self) -> Result<String, String> {
        let notes = self.notes.lock().map_err(|_| "the notebook is broken")?;
        Ok(notes.join("\n"))
    }

    /// Every note of this session, one per line, oldest first.
    #[resource(uri = "notes://all", name = "all notes", mime_type = "text/plain")]
    fn all_notes(&self) -> Result<String, String> {
        self.list_notes()
    }

    /// One note, by its number (1 is the oldest).
    #[resource(
        template = "notes://note/{number}",
        name = "note",
        mime_type = "text/plain"
    )]
    fn note(&self, #[complete(note_numbers)] number: String) -> Result<String, RequestError> {
        let notes = self
            .notes
            .lock()
            .map_err(|_| RequestError::Internal("the notebook is broken".into()))?;
        number
            .parse::<usize>()
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|at| notes.get(at).cloned())
            .ok_or_else(|| {
                RequestError::NotFound(format!(
                    "no note {number}; the notes are numbered 1 to {}",
                    notes.len()
                ))
            })
    }

    /// The numbers of the notes that start with `typed`.
    fn note_numbers(&self, typed: &str) -> Vec<String> {
        let count = self.notes.lock().map_or(0, |notes| notes.len());
        (1..=count)
            .map(|n| n.to_string())
            .filter(|n| n.starts_with(typed))
            .collect()
    }

    /// Asks the model to review the notes and suggest what to do next.
    #[prompt(title = "Review the notes")]
    fn review(
        &self,
        #[description = "What to look for, such as \"deadlines\""] focus: Option<String>,
    ) -> Result<String, String> {
        let notes = self.list_notes()?;
        let focus = focus.map_or_else(String::new, |focus| format!(", looking for {focus}"));
        Ok(format!(
            "Review these notes{focus}, and suggest what to do next:\n\n{notes}"
        ))
    }
}

llm_worker_guest::export_plugin!(Notes);
