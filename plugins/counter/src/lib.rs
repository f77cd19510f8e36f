//! A counter: state kept between calls of one session.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use llm_worker_guest::{tool, tool_registry};

/// A counter shared by its tools.
#[derive(Clone, Default)]
pub struct Counter {
    count: Arc<AtomicU64>,
}

#[tool_registry]
impl Counter {
    /// Returns the count of earlier calls in this session (0 on the first call), then adds one.
    #[tool]
    fn count(&self) -> Result<String, String> {
        Ok(self.count.fetch_add(1, Ordering::SeqCst).to_string())
    }

    /// Returns the current count without changing it.
    #[tool]
    fn peek(&self) -> Result<String, String> {
        Ok(self.count.load(Ordering::SeqCst).to_string())
    }
}

llm_worker_guest::export_plugin!(Counter);

#[cfg(test)]
mod tests {
    use super::*;
    use llm_worker_guest::__private::block_on;
    use llm_worker_guest::ToolRegistry;

    #[test]
    fn counts_within_one_registration() {
        let counter = Counter::default();
        let defs = counter.tool_definitions();
        let (_, count) = defs[0]();
        let (_, peek) = defs[1]();
        assert_eq!(block_on(count.execute("{}")), Ok("0".into()));
        assert_eq!(block_on(count.execute("{}")), Ok("1".into()));
        assert_eq!(block_on(peek.execute("{}")), Ok("2".into()));
    }
}
