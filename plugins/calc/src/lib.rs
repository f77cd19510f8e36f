//! A calculator: numbers in, numbers out, errors as `Result`.

use llm_worker_guest::{tool, tool_registry};

/// Arithmetic tools.
#[derive(Clone, Default)]
pub struct Calc;

#[tool_registry]
impl Calc {
    /// Adds two numbers.
    #[tool]
    fn add(
        &self,
        #[description = "First addend"] a: f64,
        #[description = "Second addend"] b: f64,
    ) -> f64 {
        a + b
    }

    /// Divides `dividend` by `divisor`. Fails when the divisor is zero.
    #[tool]
    fn divide(
        &self,
        #[description = "The number to divide"] dividend: f64,
        #[description = "The number to divide by; not zero"] divisor: f64,
    ) -> Result<f64, String> {
        if divisor == 0.0 {
            return Err("division by zero; give a divisor other than 0".into());
        }
        Ok(dividend / divisor)
    }

    /// The integer square root of a non-negative whole number.
    #[tool]
    fn isqrt(&self, #[description = "A whole number, 0 or more"] n: u64) -> u64 {
        n.isqrt()
    }
}

llm_worker_guest::export_plugin!(Calc);
