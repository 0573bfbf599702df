//! Structured output: content that fails the request's JSON Schema or parse function is
//! `ResultInvalid` (the provider is up; ask again).

use gateway_core::request::Structured;

/// `Err(detail)` when `content` does not satisfy `structured`.
pub fn check(structured: &Structured, content: &str) -> Result<(), String> {
    match structured {
        Structured::Parse(parse) => parse(content).map_err(|why| format!("parse: {why}")),
        Structured::JsonSchema(schema) => {
            let value: serde_json::Value = serde_json::from_str(strip_fences(content)).map_err(|e| format!("not json: {e}"))?;
            let validator = jsonschema::validator_for(schema).map_err(|e| format!("invalid schema: {e}"))?;
            match validator.iter_errors(&value).next() {
                None => Ok(()),
                Some(error) => Err(format!("schema: {error} at {}", error.instance_path)),
            }
        }
    }
}

/// `Err(why)` when `schema` is not a usable JSON Schema (check it before sending a request that
/// would otherwise spend its re-asks on it).
pub fn check_schema(schema: &serde_json::Value) -> Result<(), String> {
    jsonschema::validator_for(schema).map(drop).map_err(|e| e.to_string())
}

/// Models often wrap JSON in a Markdown code fence; the JSON inside is what counts.
fn strip_fences(content: &str) -> &str {
    let trimmed = content.trim();
    let Some(inner) = trimmed.strip_prefix("```") else { return trimmed };
    let inner = inner.strip_prefix("json").unwrap_or(inner);
    inner.strip_suffix("```").unwrap_or(inner).trim()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn schema_and_parse_checks() {
        let schema =
            Structured::JsonSchema(serde_json::json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}));
        assert!(check(&schema, r#"{"a": 1}"#).is_ok());
        assert!(check(&schema, "```json\n{\"a\": 1}\n```").is_ok());
        assert!(check(&schema, r#"{"a": "x"}"#).unwrap_err().starts_with("schema:"));
        assert!(check(&schema, "not json").unwrap_err().starts_with("not json"));
        let parse = Structured::Parse(Arc::new(|c: &str| if c.contains("ok") { Ok(()) } else { Err("no ok".into()) }));
        assert!(check(&parse, "ok!").is_ok());
        assert_eq!(check(&parse, "nope").unwrap_err(), "parse: no ok");
        let broken = Structured::JsonSchema(serde_json::json!({"type": 12}));
        assert!(check(&broken, "{}").unwrap_err().starts_with("invalid schema"));
    }
}

#[cfg(test)]
mod schema_tests {
    #[test]
    fn an_unusable_schema_is_named() {
        assert!(super::check_schema(&serde_json::json!({"type": 12})).is_err());
        assert!(super::check_schema(&serde_json::json!({"type": "object"})).is_ok());
    }
}
