//! Shared support for the repository-wide tests in `tests/tests/`: the workspace root and a
//! walk over its Rust sources; and, for any crate's test target whose cases need a live Redis,
//! the harness that runs them, skips them honestly or fails them ([`redis_cases`]).

pub mod redis_cases;

use std::path::{Path, PathBuf};

/// The workspace root (the parent of this crate's folder).
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().map_or_else(|| here.to_path_buf(), Path::to_path_buf)
}

/// Every `.rs` file under `dir`, skipping `target/` and hidden folders, sorted.
pub fn rust_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    pending.push(path);
                }
            } else if name.ends_with(".rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}
