//! Structured output: content that fails the request's JSON Schema or parse function is
//! `ResultInvalid` (the provider is up; ask again).
//!
//! A schema comes from the caller, so it is bounded before it is compiled
//! ([`schema_bounds`](crate::schema_bounds): depth, size, references, expansion), and each
//! distinct schema is compiled once: [`Schemas`] keeps the compiled validators (and the refusals)
//! in a cache keyed by the SHA-256 of the schema's JSON, bounded by the schema bytes it holds.

pub use crate::schema_bounds::{MAX_DEPTH, SchemaLimits, SchemaRefusal};
use crate::schema_bounds::{check as check_bounds, depth};
use gateway_core::request::Structured;
use jsonschema::{PatternOptions, Validator};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

/// Why a schema cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// Outside the gateway's bounds.
    #[error("{0}")]
    Refused(#[from] SchemaRefusal),
    /// The validator refused it (not a JSON Schema, an unknown draft, a bad regex).
    #[error("not a usable JSON Schema: {0}")]
    Invalid(String),
}

/// Backtracking steps one `pattern` may take on one string (fancy-regex's default is 10⁶), and
/// the size of one compiled pattern and of its lazy DFA cache.
const BACKTRACK_LIMIT: usize = 100_000;
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Compiled schemas, bounded by [`SchemaLimits`] and cached by digest.
pub struct Schemas {
    limits: SchemaLimits,
    /// Most schema bytes the cache holds (each entry counts its schema's JSON length).
    capacity: usize,
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    entries: HashMap<[u8; 32], Entry>,
    bytes: usize,
    clock: u64,
}

struct Entry {
    compiled: Result<Arc<Validator>, SchemaError>,
    bytes: usize,
    used: u64,
}

impl std::fmt::Debug for Schemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schemas").field("limits", &self.limits).field("capacity", &self.capacity).finish_non_exhaustive()
    }
}

impl Default for Schemas {
    fn default() -> Self {
        Schemas::new(SchemaLimits::default())
    }
}

/// A writer that refuses to grow past its cap (the schema's JSON, without an unbounded buffer).
struct Capped {
    bytes: Vec<u8>,
    cap: usize,
}

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.cap {
            return Err(std::io::Error::other("over the cap"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Schemas {
    /// Schemas within `limits`, with a cache of 4 MiB of schemas (64 of the largest, thousands of
    /// the usual few hundred bytes).
    pub fn new(limits: SchemaLimits) -> Self {
        Schemas { limits, capacity: 4 << 20, cache: Mutex::default() }
    }

    /// The limits schemas are held to.
    pub fn limits(&self) -> &SchemaLimits {
        &self.limits
    }

    /// The validator of `schema`, compiled once per distinct schema; an error says why the schema
    /// cannot be used (bounds first, then the validator's own verdict).
    pub fn compile(&self, schema: &Value) -> Result<Arc<Validator>, SchemaError> {
        // Depth before serializing: serde_json serializes (and drops) recursively.
        if depth(schema) > MAX_DEPTH {
            return Err(SchemaRefusal::TooDeep.into());
        }
        let mut json = Capped { bytes: Vec::new(), cap: self.limits.max_bytes };
        if serde_json::to_writer(&mut json, schema).is_err() {
            return Err(SchemaRefusal::TooLarge { limit: self.limits.max_bytes }.into());
        }
        let digest: [u8; 32] = Sha256::digest(&json.bytes).into();
        if let Some(found) = self.lookup(&digest) {
            return found;
        }
        let compiled = check_bounds(schema, &self.limits).map_err(SchemaError::from).and_then(|()| {
            jsonschema::options()
                .with_pattern_options(
                    PatternOptions::fancy_regex()
                        .backtrack_limit(BACKTRACK_LIMIT)
                        .size_limit(REGEX_SIZE_LIMIT)
                        .dfa_size_limit(REGEX_SIZE_LIMIT),
                )
                .build(schema)
                .map(Arc::new)
                .map_err(|e| SchemaError::Invalid(e.to_string()))
        });
        self.insert(digest, json.bytes.len(), compiled.clone());
        compiled
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lookup(&self, digest: &[u8; 32]) -> Option<Result<Arc<Validator>, SchemaError>> {
        let mut cache = self.lock();
        cache.clock += 1;
        let now = cache.clock;
        let entry = cache.entries.get_mut(digest)?;
        entry.used = now;
        Some(entry.compiled.clone())
    }

    /// Keeps `compiled`, dropping the least recently used entries to stay within the capacity.
    fn insert(&self, digest: [u8; 32], bytes: usize, compiled: Result<Arc<Validator>, SchemaError>) {
        let mut cache = self.lock();
        while cache.bytes + bytes > self.capacity {
            let Some(oldest) = cache.entries.iter().min_by_key(|(_, e)| e.used).map(|(d, _)| *d) else { break };
            if let Some(dropped) = cache.entries.remove(&oldest) {
                cache.bytes -= dropped.bytes;
            }
        }
        cache.clock += 1;
        let used = cache.clock;
        if let Some(replaced) = cache.entries.insert(digest, Entry { compiled, bytes, used }) {
            cache.bytes -= replaced.bytes;
        }
        cache.bytes += bytes;
    }

    /// Schemas in the cache (compiled or refused).
    pub fn cached(&self) -> usize {
        self.lock().entries.len()
    }

    /// `Err(detail)` when `content` does not satisfy `structured`.
    pub fn check(&self, structured: &Structured, content: &str) -> Result<(), String> {
        match structured {
            Structured::Parse(parse) => parse(content).map_err(|why| format!("parse: {why}")),
            Structured::JsonSchema(schema) => {
                let validator = self.compile(schema).map_err(|e| format!("invalid schema: {e}"))?;
                let value: Value = serde_json::from_str(strip_fences(content)).map_err(|e| format!("not json: {e}"))?;
                match validator.iter_errors(&value).next() {
                    None => Ok(()),
                    Some(error) => Err(format!("schema: {error} at {}", error.instance_path())),
                }
            }
        }
    }
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
    use serde_json::json;

    #[test]
    fn schema_and_parse_checks() {
        let schemas = Schemas::default();
        let schema = Structured::JsonSchema(json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}));
        assert!(schemas.check(&schema, r#"{"a": 1}"#).is_ok());
        assert!(schemas.check(&schema, "```json\n{\"a\": 1}\n```").is_ok());
        assert!(schemas.check(&schema, r#"{"a": "x"}"#).unwrap_err().starts_with("schema:"));
        assert!(schemas.check(&schema, "not json").unwrap_err().starts_with("not json"));
        let parse = Structured::Parse(Arc::new(|c: &str| if c.contains("ok") { Ok(()) } else { Err("no ok".into()) }));
        assert!(schemas.check(&parse, "ok!").is_ok());
        assert_eq!(schemas.check(&parse, "nope").unwrap_err(), "parse: no ok");
        let broken = Structured::JsonSchema(json!({"type": 12}));
        assert!(schemas.check(&broken, "{}").unwrap_err().starts_with("invalid schema: not a usable JSON Schema"));
        let bomb = Structured::JsonSchema(json!({"allOf": [{"$ref": "#"}]}));
        assert!(schemas.check(&bomb, "{}").unwrap_err().contains("endless validation"));
    }

    #[test]
    fn each_distinct_schema_is_compiled_once_and_refusals_are_kept_too() {
        let schemas = Schemas::default();
        let a = schemas.compile(&json!({"type": "string"})).unwrap();
        let again = schemas.compile(&json!({"type": "string"})).unwrap();
        assert!(Arc::ptr_eq(&a, &again), "the second compile is the cached validator");
        assert!(schemas.compile(&json!({"$ref": "#"})).is_err());
        assert!(schemas.compile(&json!({"$ref": "#"})).is_err());
        assert_eq!(schemas.cached(), 2);
    }

    #[test]
    fn the_cache_keeps_the_most_recently_used_within_its_bytes() {
        let schemas = Schemas { capacity: 200, ..Schemas::default() };
        let schema = |i: usize| json!({"type": "string", "description": format!("{i:040}")});
        let first = schemas.compile(&schema(0)).unwrap();
        for i in 1..20 {
            schemas.compile(&schema(i)).unwrap();
            schemas.compile(&schema(0)).unwrap(); // keep 0 recent
        }
        assert!(schemas.cached() <= 200 / 60 + 1, "{} entries", schemas.cached());
        assert!(Arc::ptr_eq(&first, &schemas.compile(&schema(0)).unwrap()), "the recently used entry stayed");
        assert!(schemas.lock().bytes <= 200);
    }

    #[test]
    fn size_and_depth_are_checked_before_anything_else() {
        let schemas = Schemas::new(SchemaLimits { max_bytes: 100, ..SchemaLimits::default() });
        let big = json!({"description": "x".repeat(200)});
        assert_eq!(schemas.compile(&big).unwrap_err(), SchemaError::Refused(SchemaRefusal::TooLarge { limit: 100 }));
        let mut deep = json!({"type": "string"});
        for _ in 0..200 {
            deep = json!({"not": deep});
        }
        assert_eq!(schemas.compile(&deep).unwrap_err(), SchemaError::Refused(SchemaRefusal::TooDeep));
    }
}
