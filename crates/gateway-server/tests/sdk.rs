//! The official `openai` Python package against the proxy (plain, streamed, embeddings, an
//! unknown model, an open circuit), through `tests/openai_sdk.py`. Where Python or the package
//! is missing the test says SKIPPED and why, unless `GATEWAY_SDK_REQUIRED=1` (set by `.ci/run`,
//! which installs the package) makes that a failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::process::Command;

fn required() -> bool {
    std::env::var("GATEWAY_SDK_REQUIRED").is_ok_and(|v| v == "1" || v == "true")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_sdk_talks_to_the_proxy() {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let probe = Command::new(&python).args(["-c", "import openai"]).output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        let why = match probe {
            Err(e) => format!("{python} cannot run: {e}"),
            Ok(o) => format!("the openai package is not installed ({})", String::from_utf8_lossy(&o.stderr).trim()),
        };
        assert!(!required(), "GATEWAY_SDK_REQUIRED=1 but {why}");
        let _ = writeln!(std::io::stderr(), "SKIPPED the_official_openai_python_sdk_talks_to_the_proxy: {why} (pip install openai)");
        return;
    }
    let r = support::start().await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openai_sdk.py");
    let base = format!("{}/v1", r.url);
    let output = tokio::process::Command::new(&python).args([script, &base, support::KEY]).output().await.unwrap();
    assert!(
        output.status.success(),
        "openai_sdk.py failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
