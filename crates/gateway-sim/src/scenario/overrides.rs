//! `cargo xtask soak --set KEY=VALUE`: a scenario file with some of its keys overridden.

/// `text`, a scenario file, with each of `sets` (`a.b.c=VALUE`) written into it. A key the
/// scenario does not know is refused when the result is read, naming it.
pub(super) fn overridden(text: &str, sets: &[String]) -> Result<String, String> {
    if sets.is_empty() {
        return Ok(text.to_owned());
    }
    let mut root: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
    for set in sets {
        let Some((key, value)) = set.split_once('=') else { return Err(format!("--set {set:?}: expected KEY=VALUE")) };
        let key = key.trim();
        let path: Vec<&str> = key.split('.').collect();
        if path.iter().any(|part| part.is_empty()) {
            return Err(format!("--set {set:?}: {key:?} is not a dotted key"));
        }
        let value = match toml::from_str::<toml::Table>(&format!("v = {}", value.trim())) {
            Ok(mut table) => table.remove("v").unwrap_or_else(|| toml::Value::String(value.trim().to_owned())),
            Err(_) => toml::Value::String(value.trim().to_owned()),
        };
        let (leaf, parents) = path.split_last().ok_or_else(|| format!("--set {set:?}: no key"))?;
        let mut table = &mut root;
        for (depth, part) in parents.iter().enumerate() {
            let entry = table.entry((*part).to_owned()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
            table = entry.as_table_mut().ok_or_else(|| format!("--set {set:?}: {} is not a table", path[..=depth].join(".")))?;
        }
        table.insert((*leaf).to_owned(), value);
    }
    toml::to_string(&root).map_err(|e| e.to_string())
}
