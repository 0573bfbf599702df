//! Why a policy value was refused, and the field reader that names the key at fault.

use std::fmt;
use std::time::Duration;

/// A policy value that is missing, out of range or malformed, with the dotted key at fault.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct PolicyError {
    /// Dotted, lower-case key, e.g. `chat.breaker.cooldown_s` or `chat.sources.s1.rpm`.
    pub key: String,
    /// What is wrong with it.
    pub problem: Problem,
}

impl PolicyError {
    pub(super) fn new(key: impl Into<String>, problem: Problem) -> Self {
        PolicyError { key: key.into(), problem }
    }

    /// The same key in environment form: `chat.breaker.cooldown_s` → `CHAT__BREAKER__COOLDOWN_S`.
    pub fn env_key(&self) -> String {
        self.key.split('.').map(str::to_ascii_uppercase).collect::<Vec<_>>().join("__")
    }
}

/// Why a policy value was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Problem {
    /// A required key has no value in any layer.
    #[error("required key is missing")]
    Missing,
    /// A number outside its allowed range.
    #[error("value {value} is out of range (expected {expected})")]
    OutOfRange {
        /// The value given, as written.
        value: String,
        /// The allowed range, in words.
        expected: String,
    },
    /// A value of the right type that is still unusable.
    #[error("value {value:?} is invalid ({reason})")]
    Invalid {
        /// The value given.
        value: String,
        /// Why it cannot be used.
        reason: String,
    },
}

/// Reads one key of a config section: joins the section's key prefix with field names and checks
/// ranges, so every error carries the full key.
pub(super) struct Fields<'a> {
    pub(super) prefix: &'a str,
}

impl Fields<'_> {
    pub(super) fn key(&self, field: &str) -> String {
        if self.prefix.is_empty() { field.to_owned() } else { format!("{}.{field}", self.prefix) }
    }

    pub(super) fn required<T: Copy>(&self, field: &str, value: Option<T>) -> Result<T, PolicyError> {
        value.ok_or_else(|| PolicyError::new(self.key(field), Problem::Missing))
    }

    pub(super) fn int(&self, field: &str, value: u32, min: u32, max: u32) -> Result<u32, PolicyError> {
        if (min..=max).contains(&value) { Ok(value) } else { Err(self.out_of_range(field, value, format!("{min}..={max}"))) }
    }

    /// A byte count of at least `min` (and at most 1 TiB).
    pub(super) fn bytes(&self, field: &str, value: u64, min: u64) -> Result<u64, PolicyError> {
        const MAX: u64 = 1 << 40;
        if (min..=MAX).contains(&value) { Ok(value) } else { Err(self.out_of_range(field, value, format!("{min}..={MAX} bytes"))) }
    }

    /// Seconds in `min..=max`, returned as a whole-millisecond duration.
    pub(super) fn secs(&self, field: &str, value: f64, min: f64, max: f64) -> Result<Duration, PolicyError> {
        if value.is_finite() && value >= min && value <= max {
            Ok(Duration::from_millis((value * 1000.0).round() as u64))
        } else {
            Err(self.out_of_range(field, value, format!("{min}..={max} seconds")))
        }
    }

    pub(super) fn fraction(&self, field: &str, value: f64) -> Result<f64, PolicyError> {
        if value.is_finite() && value > 0.0 && value <= 1.0 {
            Ok(value)
        } else {
            Err(self.out_of_range(field, value, "a fraction in (0, 1]".to_owned()))
        }
    }

    /// A value of the right type that cannot be used, and why.
    pub(super) fn invalid(&self, field: &str, value: &str, reason: &str) -> PolicyError {
        PolicyError::new(self.key(field), Problem::Invalid { value: value.to_owned(), reason: reason.to_owned() })
    }

    pub(super) fn out_of_range(&self, field: &str, value: impl fmt::Display, expected: String) -> PolicyError {
        PolicyError::new(self.key(field), Problem::OutOfRange { value: value.to_string(), expected })
    }
}

/// A day in seconds: the upper bound of most durations.
pub(super) const DAY_S: f64 = 86_400.0;

/// Names become environment keys (which are matched case-blind) and Redis key parts, so they
/// are kept to one case and a safe alphabet.
pub(super) fn check_name(name: &str, key: &str) -> Result<(), PolicyError> {
    if !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-') {
        Ok(())
    } else {
        Err(PolicyError::new(
            key,
            Problem::Invalid { value: name.to_owned(), reason: "names use only lower-case letters, digits, '_' and '-'".to_owned() },
        ))
    }
}
