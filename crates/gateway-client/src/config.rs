//! Configuration (SPEC §9): built-in defaults ← a TOML file ← the environment, with
//! [figment](https://docs.rs/figment). Every error names the key and the layer it came from.
//!
//! The file holds one table per scope (`[chat]`, `[chat.breaker]`, `[chat.sources.s1]`). The
//! environment overrides any key as `{SCOPE}__KEY`, `{SCOPE}__BREAKER__KEY` or
//! `{SCOPE}__SOURCES__{NAME}__KEY`; a variable is read only when its first part names a scope
//! of the file or one listed with [`Loader::scope`] (the environment also holds unrelated
//! variables, so a misspelt scope prefix cannot be told from them and is not read). A variable's
//! value loads as the same value written in the file would for its key's type: `5` is a number
//! for a numeric key and text for a text key (see [`EnvLayer`]). Defaults are filled by
//! `ScopeConfig::resolve` in gateway-core, which also validates every value.

use figment::providers::{Format, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use gateway_core::policy::{PolicyError, Problem, ScopeConfig, ScopePolicy};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// A configuration error: the key (in the form of the layer that set it), the layer, and what
/// is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key} ({layer}): {message}")]
pub struct ConfigError {
    /// The key at fault: dotted for the file (`chat.breaker.cooldown_s`), the variable name for
    /// the environment (`CHAT__BREAKER__COOLDOWN_S`).
    pub key: String,
    /// Where the value came from: `TOML file <path>`, `environment`, or `no layer` for a
    /// required key that none sets.
    pub layer: String,
    /// What is wrong.
    pub message: String,
}

/// Where environment variables come from: the process, or a fixed list (tests, tools).
#[derive(Clone, Debug, Default)]
enum EnvSource {
    #[default]
    Process,
    Fixed(Vec<(String, String)>),
}

/// Loads scopes from defaults, a TOML file and the environment.
#[derive(Clone, Debug, Default)]
pub struct Loader {
    file: Option<PathBuf>,
    scopes: Vec<String>,
    reserved: Vec<String>,
    env: EnvSource,
}

const ENV_LAYER: &str = "environment";

impl Loader {
    /// A loader with no file, reading the process environment.
    pub fn new() -> Self {
        Loader::default()
    }

    /// Reads this TOML file (it must exist).
    pub fn file(mut self, path: impl Into<PathBuf>) -> Self {
        self.file = Some(path.into());
        self
    }

    /// Also reads environment variables of `scope` (for a scope the file does not declare).
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scopes.push(scope.into().to_ascii_lowercase());
        self
    }

    /// Leaves the file's top-level table `key` alone: it is not a scope but another part of the
    /// file's owner (e.g. `[server]` for gateway-server).
    pub fn reserve(mut self, key: impl Into<String>) -> Self {
        self.reserved.push(key.into());
        self
    }

    /// Reads these variables instead of the process environment.
    pub fn env_vars(mut self, vars: impl IntoIterator<Item = (String, String)>) -> Self {
        self.env = EnvSource::Fixed(vars.into_iter().collect());
        self
    }

    /// Every scope, validated.
    pub fn load(&self) -> Result<Vec<ScopePolicy>, ConfigError> {
        let mut figment = Figment::new();
        let mut scopes = self.scopes.clone();
        if let Some(path) = &self.file {
            if !path.is_file() {
                return Err(ConfigError { key: path.display().to_string(), layer: "TOML file".into(), message: "file not found".into() });
            }
            let toml = Toml::file(path);
            let mut data = toml.data().map_err(|e| ConfigError {
                key: path.display().to_string(),
                layer: "TOML file".into(),
                message: format!("not valid TOML: {}", without_source(&e.kind.to_string())),
            })?;
            for dict in data.values_mut() {
                dict.retain(|key, _| !self.reserved.contains(key));
            }
            if let Some(dict) = data.get(&Profile::Default) {
                scopes.extend(dict.keys().map(|k| k.to_ascii_lowercase()));
            }
            figment = figment.merge(Filtered { metadata: toml.metadata(), data });
        }
        let vars = match &self.env {
            EnvSource::Process => process_vars(),
            EnvSource::Fixed(vars) => vars.clone(),
        };
        let (figment, raw) =
            EnvLayer::new(vars, &scopes)?.extract::<BTreeMap<String, ScopeConfig>>(&figment).map_err(|e| from_figment(*e, &self.file))?;
        raw.iter().map(|(name, config)| config.resolve(name).map_err(|e| from_policy(&figment, e))).collect()
    }
}

/// Loads `file` (if any) and the process environment.
pub fn load(file: Option<&Path>) -> Result<Vec<ScopePolicy>, ConfigError> {
    let mut loader = Loader::new();
    if let Some(file) = file {
        loader = loader.file(file);
    }
    loader.load()
}

/// The file's data without its reserved tables, under the file's own metadata.
struct Filtered {
    metadata: Metadata,
    data: Map<Profile, Dict>,
}

impl Provider for Filtered {
    fn metadata(&self) -> Metadata {
        self.metadata.clone()
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(self.data.clone())
    }
}

/// The variables of the process environment. Those that are not UTF-8 belong to something else:
/// they are skipped rather than refused.
pub fn process_vars() -> Vec<(String, String)> {
    std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect()
}

/// The environment layer: `{TABLE}__A__B=value` as the nested key `table.a.b`, for the variables
/// whose first part names one of the given top-level tables (matched case-blind).
///
/// A value loads as the same value written in TOML would for its key's type. It is first read
/// as TOML reads a bare value (`5` a number, `2.5` a float, `true` a boolean, `[a, b]` a list,
/// anything else text); where the key refuses that type, it is read again as its text, which a
/// text key takes whatever it looks like (a tenant's tier `1`, an API key of digits). A key that
/// refuses the text too keeps the error about the value as first read (`float 2.5, expected u32`).
pub struct EnvLayer {
    dict: Dict,
    /// The text of each variable that was first read as something else, by its key path.
    text: BTreeMap<Vec<String>, String>,
}

impl EnvLayer {
    /// The layer of `vars` for the top-level `tables` (lower-case names). A variable with an
    /// empty key part (`CHAT____RPM`), or one that sets both a value and a section under it, is
    /// an error naming the variable.
    pub fn new(vars: Vec<(String, String)>, tables: &[String]) -> Result<Self, ConfigError> {
        let mut layer = EnvLayer { dict: Dict::new(), text: BTreeMap::new() };
        for (name, raw) in vars {
            let parts: Vec<String> = name.split("__").map(str::to_ascii_lowercase).collect();
            if parts.len() < 2 || !tables.contains(&parts[0]) {
                continue;
            }
            if parts.iter().any(String::is_empty) {
                return Err(ConfigError {
                    key: name,
                    layer: ENV_LAYER.into(),
                    message: "empty key part (a doubled or trailing '__')".into(),
                });
            }
            let value: Value = raw.parse().unwrap_or_else(|never| match never {});
            insert(&mut layer.dict, &parts, value.clone()).map_err(|message| ConfigError {
                key: name.clone(),
                layer: ENV_LAYER.into(),
                message,
            })?;
            if !matches!(&value, Value::String(_, text) if *text == raw) {
                layer.text.insert(parts, raw);
            }
        }
        Ok(layer)
    }

    /// `T` from `base` with this layer merged over it, and the figment it came from (to find
    /// where a value was set). Each variable is read again as its text at most once, so this
    /// ends after at most one extraction per variable.
    pub fn extract<T: DeserializeOwned>(mut self, base: &Figment) -> Result<(Figment, T), Box<figment::Error>> {
        let mut reread: Option<figment::Error> = None;
        loop {
            let figment = base.clone().merge(&self);
            let error = match figment.extract::<T>() {
                Ok(value) => return Ok((figment, value)),
                Err(error) => error,
            };
            if let Some(first) = reread.take().filter(|first| first.path == error.path) {
                // The key refuses its text too. A refused type is best told as first read (the
                // number, not the text of it); any other refusal (an unknown variant) is the text's.
                return Err(Box::new(if matches!(error.kind, figment::error::Kind::InvalidType(..)) { first } else { error }));
            }
            if !self.read_as_text(&error) {
                return Err(Box::new(error));
            }
            reread = Some(error);
        }
    }

    /// Reads the variable `error` is about as its text, if the error is a refused type of a
    /// variable not read so.
    fn read_as_text(&mut self, error: &figment::Error) -> bool {
        let from_env = error.metadata.as_ref().is_some_and(|m| m.name == ENV_LAYER);
        if !from_env || !matches!(error.kind, figment::error::Kind::InvalidType(..)) {
            return false;
        }
        match self.text.remove(&error.path) {
            // The path was inserted once already, so it holds a value where the text goes.
            Some(text) => insert(&mut self.dict, &error.path, Value::from(text)).is_ok(),
            None => false,
        }
    }
}

fn insert(dict: &mut Dict, path: &[String], value: Value) -> Result<(), String> {
    match path {
        [] => Ok(()),
        [last] => {
            dict.insert(last.clone(), value);
            Ok(())
        }
        [first, rest @ ..] => {
            let entry = dict.entry(first.clone()).or_insert_with(|| Value::from(Dict::new()));
            match entry {
                Value::Dict(_, inner) => insert(inner, rest, value),
                _ => Err(format!("{first} is both a value and a section")),
            }
        }
    }
}

impl Provider for EnvLayer {
    fn metadata(&self) -> Metadata {
        Metadata::named(ENV_LAYER)
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Map::from([(Profile::Default, self.dict.clone())]))
    }
}

/// The key as its layer spells it: the variable name for the environment.
fn key_in_layer(dotted: &str, from_env: bool) -> String {
    if from_env { dotted.split('.').map(str::to_ascii_uppercase).collect::<Vec<_>>().join("__") } else { dotted.to_owned() }
}

fn layer_name(metadata: Option<&Metadata>, file: &Option<PathBuf>) -> (String, bool) {
    match metadata {
        Some(m) if m.name == ENV_LAYER => (ENV_LAYER.to_owned(), true),
        Some(_) => (format!("TOML file {}", file.as_ref().map_or_else(String::new, |p| p.display().to_string())), false),
        None => ("no layer".to_owned(), false),
    }
}

fn from_figment(error: figment::Error, file: &Option<PathBuf>) -> ConfigError {
    describe(error, file.as_deref(), is_secret)
}

/// A figment error of a config layered from `file` and the environment (by this module's
/// loaders, or a table of the same file a tool reads, as the proxy reads `[server]`): the key as
/// its layer spells it (dotted, or the variable's name), the layer, and the message, without the
/// value when `secret` says the key may hold one.
pub fn describe(error: figment::Error, file: Option<&Path>, secret: impl Fn(&[String]) -> bool) -> ConfigError {
    let file = file.map(Path::to_path_buf);
    let (layer, from_env) = layer_name(error.metadata.as_ref(), &file);
    // For an unknown field the path already ends with the field's name.
    let dotted = error.path.join(".");
    let message = if secret(&error.path) { secret_message(&error.kind) } else { Message(&error.kind).to_string() };
    ConfigError { key: key_in_layer(&dotted, from_env), layer, message }
}

/// A TOML parse error without the excerpt of the file it quotes (the line may hold a secret):
/// the position and the reason stay.
fn without_source(message: &str) -> String {
    let quoted = |line: &str| {
        let line = line.trim_start();
        line.starts_with('|')
            || line.split_once('|').is_some_and(|(number, _)| !number.is_empty() && number.trim().chars().all(|c| c.is_ascii_digit()))
    };
    message.lines().filter(|line| !line.trim().is_empty() && !quoted(line)).collect::<Vec<_>>().join("; ")
}

/// Keys whose values may be secrets (a provider key, an `Authorization` header): an error about
/// them never shows the value, whatever its type.
fn is_secret(path: &[String]) -> bool {
    path.last().is_some_and(|last| last == "api_key") || path.iter().any(|part| part == "headers")
}

/// A figment error about a secret's key, without the value it was about (for every loader of
/// a file with secrets: the scopes here, the proxy's `[server]` table).
pub fn secret_message(kind: &figment::error::Kind) -> String {
    use figment::error::Kind;
    match kind {
        Kind::InvalidType(_, expected) => format!("invalid type (the value is not shown), expected {expected}"),
        Kind::UnknownField(field, _) => format!("unknown key {field:?}"),
        Kind::MissingField(field) => format!("required key {field:?} is missing"),
        _ => "invalid value (the value is not shown)".to_owned(),
    }
}

/// A figment error kind in the house style (lower case, the value named).
struct Message<'a>(&'a figment::error::Kind);

impl fmt::Display for Message<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use figment::error::Kind;
        match self.0 {
            Kind::UnknownField(field, _) => write!(f, "unknown key {field:?}"),
            Kind::UnknownVariant(value, expected) => write!(f, "unknown value {value:?} (expected one of {})", expected.join(", ")),
            Kind::InvalidType(actual, expected) => write!(f, "invalid type: {actual}, expected {expected}"),
            other => write!(f, "{other}"),
        }
    }
}

fn from_policy(figment: &Figment, error: PolicyError) -> ConfigError {
    let metadata = figment.find_metadata(&error.key);
    let (layer, from_env) = match (&error.problem, metadata) {
        (Problem::Missing, None) => ("no layer sets it".to_owned(), false),
        (_, m) => layer_name(m, &None),
    };
    let layer = if layer.starts_with("TOML file") {
        metadata.and_then(|m| m.source.as_ref()).map_or(layer, |source| format!("TOML file {source}"))
    } else {
        layer
    };
    ConfigError { key: key_in_layer(&error.key, from_env), layer, message: error.problem.to_string() }
}
