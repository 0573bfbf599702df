//! `cargo xtask deps`: the dependency-direction rules of STYLE.md rule 5, checked on the real
//! resolved graph (`cargo tree -e normal`), not on what the manifests say. The test suite runs
//! the same check (this module's test), so CI needs no separate step.

use std::process::Command;

/// Crates that must never be in gateway-core's normal dependency graph.
const FORBIDDEN_IN_CORE: &[&str] = &["tokio", "fred", "redis", "reqwest", "hyper", "hyper-util", "axum", "tower", "mio"];

/// Crates allowed to depend on fred (directly or not).
const FRED_OWNERS: &[&str] = &["gateway-redis"];

pub fn run() -> Result<(), String> {
    println!("{}", check()?);
    Ok(())
}

/// Checks the rules on the workspace's resolved graph; what held, in a line.
fn check() -> Result<String, String> {
    let core = tree(&["-p", "gateway-core", "-e", "normal"])?;
    let found: Vec<&str> = FORBIDDEN_IN_CORE.iter().copied().filter(|name| mentions(&core, name)).collect();
    if !found.is_empty() {
        return Err(format!("gateway-core depends on {} (it must stay free of runtimes, Redis and HTTP):\n{core}", found.join(", ")));
    }
    // Direct dependents only: crates built on gateway-redis reach fred through it, as they should.
    let inverted = direct_dependents("fred")?;
    let offenders: Vec<&str> = inverted
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| name.starts_with("gateway-") && !FRED_OWNERS.contains(name))
        .collect();
    if !offenders.is_empty() {
        return Err(format!("fred is reachable from {} (only {} may use it)", offenders.join(", "), FRED_OWNERS.join(", ")));
    }
    Ok(format!("deps: gateway-core is free of {}; fred stays under {}", FORBIDDEN_IN_CORE.join("/"), FRED_OWNERS.join(", ")))
}

/// The packages that depend on `package` directly, one a line; none when the graph lacks it.
/// Any other failure of `cargo tree` is an error, never an empty (passing) listing.
fn direct_dependents(package: &str) -> Result<String, String> {
    match tree(&["--workspace", "-e", "normal", "-i", package, "--depth", "1", "--prefix", "none"]) {
        Err(e) if e.contains("did not match any packages") => Ok(String::new()),
        other => other,
    }
}

fn tree(args: &[&str]) -> Result<String, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo).arg("tree").args(args).output().map_err(|e| format!("cannot run cargo tree: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo tree {} failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Whether a `cargo tree` listing has the package `name` (lines read `├── name v1.2.3`).
fn mentions(listing: &str, name: &str) -> bool {
    listing.lines().any(|line| line.split_whitespace().collect::<Vec<_>>().windows(2).any(|w| w[0] == name && w[1].starts_with('v')))
}

#[cfg(test)]
mod tests {
    use super::{check, direct_dependents, mentions, tree};

    #[test]
    fn a_failing_cargo_tree_is_an_error_and_a_missing_package_has_no_dependents() {
        let error = tree(&["--no-such-flag"]).unwrap_err();
        assert!(error.starts_with("cargo tree --no-such-flag failed:"), "{error}");
        assert_eq!(direct_dependents("no-such-package-in-this-workspace"), Ok(String::new()));
        assert!(direct_dependents("fred").is_ok_and(|listing| listing.contains("gateway-redis")));
    }

    #[test]
    fn the_workspace_keeps_its_dependency_direction() {
        if let Err(e) = check() {
            panic!("{e}");
        }
    }

    #[test]
    fn matches_whole_package_names_only() {
        let listing = "gateway-core v0.1.0\n├── tokio-util v0.7.0\n│   └── tokio v1.0.0\n";
        assert!(mentions(listing, "tokio"));
        assert!(mentions(listing, "tokio-util"));
        assert!(!mentions(listing, "hyper"));
        assert!(!mentions("└── tokio-util v0.7.0\n", "tokio"));
    }
}
