//! Repository rules that `cargo test` enforces (rust-analyzer's tidy pattern): module docs on
//! every file, no ignored or panic-expecting tests, crate name = folder name, workspace lints
//! everywhere, the core's dependency direction, and a code map that names every crate.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use gateway_tests::{rust_files, workspace_root};
use std::fs;
use std::path::Path;

fn manifest(path: &Path) -> toml::Table {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.parse().unwrap_or_else(|e| panic!("{} is not valid TOML: {e}", path.display()))
}

fn crate_dirs() -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<_> = fs::read_dir(workspace_root().join("crates"))
        .expect("crates/ exists")
        .map(|entry| entry.expect("readable crates/ entry").path())
        .filter(|path| path.join("Cargo.toml").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn member_manifests() -> Vec<std::path::PathBuf> {
    let root = workspace_root();
    let mut all: Vec<_> = crate_dirs().into_iter().map(|d| d.join("Cargo.toml")).collect();
    all.push(root.join("xtask/Cargo.toml"));
    all.push(root.join("tests/Cargo.toml"));
    all
}

#[test]
fn every_rust_file_starts_with_a_module_doc() {
    let root = workspace_root();
    let mut missing = Vec::new();
    for dir in ["crates", "xtask", "tests"] {
        for file in rust_files(&root.join(dir)).expect("walk sources") {
            let text = fs::read_to_string(&file).expect("read source");
            if !text.trim_start().starts_with("//!") {
                missing.push(file.strip_prefix(&root).unwrap_or(&file).display().to_string());
            }
        }
    }
    assert!(missing.is_empty(), "files without a `//!` line saying what they own: {missing:?}");
}

#[test]
fn no_ignored_or_panic_expecting_tests() {
    // Built from parts so this file does not match itself.
    let banned = [concat!("#[", "ignore"), concat!("#[", "should_panic")];
    let root = workspace_root();
    let mut found = Vec::new();
    for dir in ["crates", "xtask", "tests"] {
        for file in rust_files(&root.join(dir)).expect("walk sources") {
            let text = fs::read_to_string(&file).expect("read source");
            for pattern in banned {
                if text.contains(pattern) {
                    found.push(format!("{} uses {pattern}]", file.display()));
                }
            }
        }
    }
    assert!(found.is_empty(), "assert on the error value instead: {found:?}");
}

#[test]
fn crate_names_match_folders() {
    for dir in crate_dirs() {
        let folder = dir.file_name().and_then(|n| n.to_str()).expect("utf-8 folder name").to_owned();
        let name = manifest(&dir.join("Cargo.toml"))["package"]["name"].as_str().map(str::to_owned);
        assert_eq!(name.as_deref(), Some(folder.as_str()), "crates/{folder} must be named {folder}");
    }
}

#[test]
fn every_member_uses_the_workspace_package_and_lints() {
    for path in member_manifests() {
        let m = manifest(&path);
        let lints = m.get("lints").and_then(|l| l.get("workspace")).and_then(toml::Value::as_bool);
        assert_eq!(lints, Some(true), "{}: add `[lints] workspace = true`", path.display());
        for key in ["version", "edition", "license"] {
            let inherited = m["package"].get(key).and_then(|v| v.get("workspace")).and_then(toml::Value::as_bool);
            assert_eq!(inherited, Some(true), "{}: `{key}.workspace = true`", path.display());
        }
    }
}

#[test]
fn gateway_core_declares_no_runtime_redis_or_http_dependency() {
    let m = manifest(&workspace_root().join("crates/gateway-core/Cargo.toml"));
    let deps = m.get("dependencies").and_then(toml::Value::as_table).cloned().unwrap_or_default();
    for forbidden in ["tokio", "fred", "redis", "reqwest", "hyper", "hyper-util", "axum", "tower"] {
        assert!(!deps.contains_key(forbidden), "gateway-core must not depend on {forbidden}");
    }
}

#[test]
fn architecture_code_map_names_every_crate() {
    let doc = fs::read_to_string(workspace_root().join("docs/ARCHITECTURE.md")).expect("docs/ARCHITECTURE.md exists");
    for dir in crate_dirs() {
        let name = dir.file_name().and_then(|n| n.to_str()).expect("utf-8 folder name");
        assert!(doc.contains(&format!("### `{name}`")), "docs/ARCHITECTURE.md has no code-map section `### `{name}``");
    }
    assert!(doc.contains("**Architecture Invariant:**"), "the code map states its invariants");
}

/// ARCHITECTURE: no loop matches on outcome classes; the outcome table says what a class does.
/// In the client's loops a class is only ever built (`Outcome::new(OutcomeClass::X, …)`, a
/// `class: OutcomeClass::X` field) or passed on, never compared, matched or imported by variant.
#[test]
fn the_call_loops_never_match_on_outcome_classes() {
    let root = workspace_root();
    let mut found = Vec::new();
    for file in rust_files(&root.join("crates/gateway-client/src")).expect("walk sources") {
        let text = fs::read_to_string(&file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            let mut rest = code;
            while let Some(at) = rest.find("OutcomeClass::") {
                let before = rest[..at].trim_end();
                let built = before.ends_with("Outcome::new(") || before.ends_with("class:");
                if !built {
                    found.push(format!("{}:{}: {}", file.strip_prefix(&root).unwrap().display(), n + 1, line.trim()));
                    break;
                }
                rest = &rest[at + "OutcomeClass::".len()..];
            }
        }
    }
    assert!(
        found.is_empty(),
        "the call loops name an outcome class other than to build one (use the outcome table's effects):\n{}",
        found.join("\n")
    );
}
