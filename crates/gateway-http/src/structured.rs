//! Structured output: content that fails the request's JSON Schema or parse function is
//! `ResultInvalid` (the provider is up; ask again).
//!
//! A schema comes from the caller, so it is bounded before it is compiled
//! ([`schema_bounds`](crate::schema_bounds): depth, size, references, patterns, expansion), and
//! each distinct schema is compiled once: [`Schemas`] keeps the compiled validators (and the
//! refusals) in a cache keyed by the SHA-256 of the schema's JSON, bounded by entries and by a
//! weight that counts what a compiled schema can hold (its patterns' automata above all).
//! Patterns use the linear-time `regex` engine (no backtracking: no lookaround or back-references),
//! and a validation is refused when the answer is too large for its schema's budget.

pub use crate::schema_bounds::{MAX_DEPTH, SchemaCost, SchemaLimits, SchemaRefusal};
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

/// Why an answer does not satisfy its compiled schema.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// The answer is too large to validate within the work budget (values × subschemas).
    #[error("too large to validate: more than {values} values × {per_value} subschemas per value")]
    TooLarge {
        /// The answer's values, counted up to where the budget ran out.
        values: u64,
        /// The schema's subschemas applied to each value.
        per_value: u64,
    },
    /// The validator's first error, and where in the answer it is.
    #[error("schema: {message} at {path}")]
    Mismatch {
        /// What the validator says is wrong.
        message: String,
        /// The JSON pointer of the value at fault (empty for the whole answer).
        path: String,
    },
}

/// Why content fails a request's structured check: the detail of its `ResultInvalid`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The request's parse function refused the content.
    #[error("parse: {0}")]
    Parse(String),
    /// The request's schema cannot be used.
    #[error("invalid schema: {0}")]
    Schema(#[from] SchemaError),
    /// The content (Markdown fences stripped) is not JSON.
    #[error("not json: {0}")]
    NotJson(String),
    /// The JSON does not satisfy the schema.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
}

/// The size of one compiled pattern, and of its lazy DFA cache.
const REGEX_SIZE_LIMIT: usize = 128 << 10;
/// What a cache entry weighs beyond its JSON and its patterns (the compiled tree).
const ENTRY_WEIGHT: usize = 16 << 10;
/// The most subschema applications one validation may make (instance values × the schema's
/// subschemas per value); a larger answer is refused as invalid rather than validated.
const MAX_VALIDATION_WORK: u64 = 10_000_000;

/// A compiled schema and what the walk found of it.
pub struct CompiledSchema {
    validator: Validator,
    cost: SchemaCost,
}

impl std::fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledSchema").field("cost", &self.cost).finish_non_exhaustive()
    }
}

impl CompiledSchema {
    /// What the walk found of the schema.
    pub fn cost(&self) -> SchemaCost {
        self.cost
    }

    /// `Err(why)` when `instance` does not satisfy the schema (or is too large to validate
    /// within the work budget).
    pub fn validate(&self, instance: &Value) -> Result<(), ValidationError> {
        let values = count_values(instance, MAX_VALIDATION_WORK / self.cost.per_value.max(1) + 1);
        if values.saturating_mul(self.cost.per_value) > MAX_VALIDATION_WORK {
            return Err(ValidationError::TooLarge { values, per_value: self.cost.per_value });
        }
        match self.validator.iter_errors(instance).next() {
            None => Ok(()),
            Some(error) => Err(ValidationError::Mismatch { message: error.to_string(), path: error.instance_path().to_string() }),
        }
    }
}

/// The values in `value` (objects, arrays and scalars), counted up to `cap`, without recursion.
fn count_values(value: &Value, cap: u64) -> u64 {
    let (mut count, mut stack) = (0u64, vec![value]);
    while let Some(v) = stack.pop() {
        count += 1;
        if count >= cap {
            break;
        }
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    count
}

/// Compiled schemas, bounded by [`SchemaLimits`] and cached by digest.
pub struct Schemas {
    limits: SchemaLimits,
    /// Most weight the cache holds.
    capacity: usize,
    /// Most entries it holds.
    max_entries: usize,
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    entries: HashMap<[u8; 32], Entry>,
    weight: usize,
    clock: u64,
}

struct Entry {
    compiled: Result<Arc<CompiledSchema>, SchemaError>,
    weight: usize,
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
    /// Schemas within `limits`, with a cache of 1 024 entries weighing at most 32 MiB (an entry
    /// weighs its JSON, 16 KiB, and 128 KiB per pattern).
    pub fn new(limits: SchemaLimits) -> Self {
        Schemas { limits, capacity: 32 << 20, max_entries: 1024, cache: Mutex::default() }
    }

    /// The limits schemas are held to.
    pub fn limits(&self) -> &SchemaLimits {
        &self.limits
    }

    /// The validator of `schema`, compiled once per distinct schema; an error says why the schema
    /// cannot be used (bounds first, then the validator's own verdict).
    pub fn compile(&self, schema: &Value) -> Result<Arc<CompiledSchema>, SchemaError> {
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
        let compiled = check_bounds(schema, &self.limits).map_err(SchemaError::from).and_then(|cost| {
            jsonschema::options()
                .with_pattern_options(PatternOptions::regex().size_limit(REGEX_SIZE_LIMIT).dfa_size_limit(REGEX_SIZE_LIMIT))
                .build(schema)
                .map(|validator| Arc::new(CompiledSchema { validator, cost }))
                .map_err(|e| SchemaError::Invalid(e.to_string()))
        });
        let patterns = compiled.as_ref().map_or(0, |c| c.cost.patterns);
        self.insert(digest, json.bytes.len() + ENTRY_WEIGHT + patterns * REGEX_SIZE_LIMIT, compiled.clone());
        compiled
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lookup(&self, digest: &[u8; 32]) -> Option<Result<Arc<CompiledSchema>, SchemaError>> {
        let mut cache = self.lock();
        cache.clock += 1;
        let now = cache.clock;
        let entry = cache.entries.get_mut(digest)?;
        entry.used = now;
        Some(entry.compiled.clone())
    }

    /// Keeps `compiled`, dropping the least recently used entries to stay within the capacity
    /// (an entry heavier than the whole cache is not kept).
    fn insert(&self, digest: [u8; 32], weight: usize, compiled: Result<Arc<CompiledSchema>, SchemaError>) {
        if weight > self.capacity {
            return;
        }
        let mut cache = self.lock();
        while cache.weight + weight > self.capacity || cache.entries.len() >= self.max_entries {
            let Some(oldest) = cache.entries.iter().min_by_key(|(_, e)| e.used).map(|(d, _)| *d) else { break };
            if let Some(dropped) = cache.entries.remove(&oldest) {
                cache.weight -= dropped.weight;
            }
        }
        cache.clock += 1;
        let used = cache.clock;
        if let Some(replaced) = cache.entries.insert(digest, Entry { compiled, weight, used }) {
            cache.weight -= replaced.weight;
        }
        cache.weight += weight;
    }

    /// Schemas in the cache (compiled or refused).
    pub fn cached(&self) -> usize {
        self.lock().entries.len()
    }

    /// `Err(detail)` when `content` does not satisfy `structured`.
    pub fn check(&self, structured: &Structured, content: &str) -> Result<(), CheckError> {
        match structured {
            Structured::Parse(parse) => parse(content).map_err(CheckError::Parse),
            Structured::JsonSchema(schema) => {
                let compiled = self.compile(schema)?;
                let value: Value = serde_json::from_str(strip_fences(content)).map_err(|e| CheckError::NotJson(e.to_string()))?;
                Ok(compiled.validate(&value)?)
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
        let e = schemas.check(&schema, r#"{"a": "x"}"#).unwrap_err();
        assert_eq!(e.to_string(), r#"schema: "x" is not of type "integer" at /a"#);
        assert!(matches!(&e, CheckError::Invalid(ValidationError::Mismatch { path, .. }) if path == "/a"), "{e:?}");
        let e = schemas.check(&schema, "not json").unwrap_err();
        assert_eq!(e.to_string(), "not json: expected ident at line 1 column 2");
        assert!(matches!(e, CheckError::NotJson(_)), "{e:?}");
        let parse = Structured::Parse(Arc::new(|c: &str| if c.contains("ok") { Ok(()) } else { Err("no ok".into()) }));
        assert!(schemas.check(&parse, "ok!").is_ok());
        assert_eq!(schemas.check(&parse, "nope").unwrap_err(), CheckError::Parse("no ok".into()));
        assert_eq!(schemas.check(&parse, "nope").unwrap_err().to_string(), "parse: no ok");
        let broken = Structured::JsonSchema(json!({"type": 12}));
        let e = schemas.check(&broken, "{}").unwrap_err();
        assert!(matches!(e, CheckError::Schema(SchemaError::Invalid(_))), "{e:?}");
        assert!(e.to_string().starts_with("invalid schema: not a usable JSON Schema"), "{e}");
        let bomb = Structured::JsonSchema(json!({"allOf": [{"$ref": "#"}]}));
        let e = schemas.check(&bomb, "{}").unwrap_err();
        assert!(matches!(e, CheckError::Schema(SchemaError::Refused(_))) && e.to_string().contains("endless validation"), "{e}");
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
    fn the_cache_keeps_the_most_recently_used_within_its_weight_and_entries() {
        let schemas = Schemas { capacity: 3 * ENTRY_WEIGHT + 300, ..Schemas::default() };
        let schema = |i: usize| json!({"type": "string", "description": format!("{i:040}")});
        let first = schemas.compile(&schema(0)).unwrap();
        for i in 1..20 {
            schemas.compile(&schema(i)).unwrap();
            schemas.compile(&schema(0)).unwrap(); // keep 0 recent
        }
        assert_eq!(schemas.cached(), 3, "three entries fit the weight");
        assert!(Arc::ptr_eq(&first, &schemas.compile(&schema(0)).unwrap()), "the recently used entry stayed");
        let few = Schemas { max_entries: 2, ..Schemas::default() };
        for i in 0..10 {
            few.compile(&schema(i)).unwrap();
        }
        assert_eq!(few.cached(), 2, "and the entry cap holds");
        // A pattern weighs its automaton: a schema of many fills the cache alone, or is not kept.
        let patterned = json!({"properties": (0..8).map(|i| (format!("p{i}"), json!({"pattern": format!("^a{{{i}}}$")}))).collect::<serde_json::Map<_, _>>()});
        let light = Schemas { capacity: 4 * REGEX_SIZE_LIMIT, ..Schemas::default() };
        assert_eq!(light.compile(&patterned).unwrap().cost().patterns, 8);
        assert_eq!(light.cached(), 0, "heavier than the whole cache: compiled, not kept");
    }

    #[test]
    fn patterns_are_linear_time_and_counted() {
        let schemas = Schemas::default();
        let backtracking = json!({"type": "string", "pattern": "^(a+)+\\1$"});
        assert!(matches!(schemas.compile(&backtracking), Err(SchemaError::Invalid(_))), "back-references need backtracking: refused");
        let many = json!({"patternProperties": (0..65).map(|i| (format!("^p{i}$"), json!({}))).collect::<serde_json::Map<_, _>>()});
        assert_eq!(schemas.compile(&many).unwrap_err(), SchemaError::Refused(SchemaRefusal::TooManyPatterns { limit: 64 }));
        let fine = Structured::JsonSchema(json!({"type": "string", "pattern": "^(a+)+$"}));
        assert!(
            schemas.check(&fine, &format!("\"{}b\"", "a".repeat(5000))).unwrap_err().to_string().starts_with("schema:"),
            "no catastrophic backtracking"
        );
    }

    #[test]
    fn an_answer_too_large_for_its_schemas_budget_is_refused_not_validated() {
        let schemas = Schemas::default();
        let wide = json!({"type": "array", "items": {"anyOf": (0..500).map(|i| json!({"const": i})).collect::<Vec<_>>()}});
        let compiled = schemas.compile(&wide).unwrap();
        assert!(compiled.cost().per_value > 500);
        let small: Value = json!([1, 2, 3]);
        assert!(compiled.validate(&small).is_ok());
        let huge = Value::Array(vec![json!(1); 50_000]);
        let e = compiled.validate(&huge).unwrap_err();
        let per_value = compiled.cost().per_value;
        assert!(matches!(e, ValidationError::TooLarge { per_value: p, .. } if p == per_value), "{e:?}");
        assert!(e.to_string().starts_with("too large to validate: more than "), "{e}");
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
