//! Structured output a call asks for: a JSON Schema or a check function its text answers must pass.

use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// A check of structured output: `Err` carries why the content was refused.
pub type ParseCheck = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Structured output a call asks for; a text answer that fails it is `ResultInvalid`.
#[derive(Clone)]
pub enum Structured {
    /// The content must be JSON matching this JSON Schema.
    JsonSchema(Value),
    /// The content must pass this function.
    Parse(ParseCheck),
}

impl fmt::Debug for Structured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Structured::JsonSchema(schema) => f.debug_tuple("JsonSchema").field(schema).finish(),
            Structured::Parse(_) => f.write_str("Parse(<fn>)"),
        }
    }
}
