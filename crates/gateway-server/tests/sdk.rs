//! The official Python SDKs against the proxy: `openai` through `tests/openai_sdk.py` (and
//! `tests/openai_sdk_surface.py`), `anthropic` through `tests/anthropic_sdk.py`. What an
//! application gets back the scripts check; what reached the provider is checked here on the
//! mock's record (every field verbatim, parts, tools, JSON modes, embeddings options; Claude
//! Code's headers beside the source's own key). Where Python or a package is missing a test says
//! SKIPPED and why, unless `GATEWAY_SDK_REQUIRED=1` (set by `.ci/run`, which installs the
//! packages) makes that a failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
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
    what_reached_the_provider(&r);
}

/// The upstream side of the script's calls, on the mock's record.
fn what_reached_the_provider(r: &support::Running) {
    let one = |marker: &str| r.provider.saying(marker).into_iter().next().unwrap_or_else(|| panic!("no request said {marker}"));
    let fields = one("FIELDS");
    let body = &fields.body;
    assert!(fields.raw.contains("\"temperature\":0.2"), "temperature 0.2 exactly: {}", fields.raw);
    for (field, value) in [
        ("top_p", json!(0.9)),
        ("n", json!(2)),
        ("stop", json!(["END"])),
        ("seed", json!(42)),
        ("logprobs", json!(true)),
        ("top_logprobs", json!(2)),
        ("user", json!("u-1")),
        ("metadata", json!({"k": "v"})),
        ("max_completion_tokens", json!(50)),
        ("presence_penalty", json!(0.5)),
        ("frequency_penalty", json!(0.25)),
        ("logit_bias", json!({"50256": -100})),
        ("vendor_knob", json!(7)),
        ("model", json!("m")),
    ] {
        assert_eq!(body[field], value, "{field} in {}", fields.raw);
    }
    assert!(body.get("max_tokens").is_none() && body.get("stream").is_none(), "nothing renamed or added: {}", fields.raw);
    assert_eq!(one("hi").body["messages"][0]["role"], "developer", "developer stays developer");
    let tools = one("TOOLS please");
    assert_eq!(tools.body["tool_choice"], json!({"type": "function", "function": {"name": "get_weather"}}));
    assert_eq!(
        (tools.body["tools"][0]["function"]["name"].as_str(), tools.body["parallel_tool_calls"].as_bool()),
        (Some("get_weather"), Some(false))
    );
    let round_trip = r.provider.received().into_iter().find(|s| s.body["messages"].as_array().is_some_and(|m| m.len() == 3)).unwrap();
    assert_eq!(round_trip.body["messages"][1]["tool_calls"][0]["id"], "call_1");
    assert_eq!(round_trip.body["messages"][2], json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"}));
    let streamed_tools = one("TOOLS streamed");
    assert_eq!(streamed_tools.body["stream"], true);
    let parts = &one("what is this").body["messages"][0]["content"];
    assert_eq!(parts[1], json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}}));
    assert_eq!(parts[2], json!({"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZF", "format": "wav"}}));
    assert_eq!(one("JSON please").body["response_format"], json!({"type": "json_object"}));
    assert_eq!(one("SCHEMA please").body["response_format"]["json_schema"]["strict"], true);
    let embeddings: Vec<_> = r.provider.received().into_iter().filter(|s| s.path.ends_with("/embeddings")).collect();
    assert!(embeddings.iter().any(|s| s.body["dimensions"] == 5), "dimensions passed on");
    assert!(embeddings.iter().any(|s| s.body["encoding_format"] == "base64"), "encoding_format passed on");
    assert!(embeddings.iter().any(|s| s.body["input"] == json!([[1, 2, 3], [4, 5]])), "token arrays passed on");
    // The cut stream was recorded on the source's gate.
    let gate = r.gates.snapshot(&gateway_core::ports::SourceKey::new("chat", "mock")).unwrap();
    assert!(gate.f0 + gate.f1 >= 1, "the cut counted as a failure: {gate:?}");
}

/// Python with the `packages` (as `import` names them), or why the test cannot run (SKIPPED
/// unless required).
fn python_with(packages: &str, test: &str) -> Option<String> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let probe = Command::new(&python).args(["-c", &format!("import {packages}")]).output();
    if probe.as_ref().is_ok_and(|o| o.status.success()) {
        return Some(python);
    }
    let why = match probe {
        Err(e) => format!("{python} cannot run: {e}"),
        Ok(o) => format!("`import {packages}` failed ({})", String::from_utf8_lossy(&o.stderr).trim().lines().last().unwrap_or_default()),
    };
    assert!(!required(), "GATEWAY_SDK_REQUIRED=1 but {why}");
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why} (pip install {})", packages.replace(", ", " "));
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_sdk_reaches_responses_images_audio_files_and_batches() {
    let Some(python) = python_with("openai", "the_official_openai_python_sdk_reaches_responses_images_audio_files_and_batches") else {
        return;
    };
    let (r, _surface) = support::start_surface(&support::surface_scope("chat", "", &[("a", "a"), ("b", "b")])).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openai_sdk_surface.py");
    let base = format!("{}/v1", r.url);
    let output = tokio::process::Command::new(&python).args([script, &base, support::KEY, &r.provider.root()]).output().await.unwrap();
    assert!(
        output.status.success(),
        "openai_sdk_surface.py failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let received = r.provider.received();
    let find = |path: &str, check: &dyn Fn(&gateway_mock::Received) -> bool| {
        received.iter().find(|q| q.path.ends_with(path) && check(q)).cloned().unwrap_or_else(|| panic!("nothing reached {path}"))
    };
    // The Responses bodies, verbatim but for the source's model.
    let tool = find("/v1/responses", &|q| q.body["input"] == "TOOLS please");
    assert_eq!(tool.body["tools"][0]["name"], "get_weather", "function tools stay flat: {}", tool.raw);
    assert!(tool.body["model"].as_str().is_some_and(|m| m.starts_with("m-")), "{}", tool.raw);
    let output_turn = find("/v1/responses", &|q| q.body["input"][0]["type"] == "function_call_output");
    assert_eq!(output_turn.body["input"][0], json!({"type": "function_call_output", "call_id": "call_1", "output": "sunny"}));
    assert!(output_turn.body["previous_response_id"].is_string());
    // A multipart upload: the source's model set, the file's bytes exactly as sent.
    let heard = find("/v1/audio/transcriptions", &|q| q.form_value("language").as_deref() == Some("en"));
    let form = heard.form().unwrap();
    let file = form.iter().find(|p| p.name == "file").unwrap();
    assert_eq!((file.filename.as_deref(), &file.data[..]), (Some("hello.wav"), &b"RIFF\x24\x00\x00\x00WAVEfmt \xff\xfe\x00\x01"[..]));
    assert!(heard.form_value("model").is_some_and(|m| m.starts_with("m-")), "model set per source");
    let edit = find("/v1/images/edits", &|_| true);
    assert_eq!(edit.form_value("prompt").as_deref(), Some("make it blue"));
    let speech = find("/v1/audio/speech", &|_| true);
    assert_eq!((speech.body["voice"].as_str(), speech.body["input"].as_str()), (Some("alloy"), Some("hello world")));
    let upload = find("/v1/files", &|_| true);
    assert_eq!(upload.form_value("purpose").as_deref(), Some("batch"));
    assert!(upload.form_value("model").is_none(), "a file names no model");
    let batch = find("/v1/batches", &|q| q.method == "POST");
    assert!(batch.body.get("model").is_none(), "a batch names no model: {}", batch.raw);
    assert_eq!(batch.path.split('/').nth(1), upload.path.split('/').nth(1), "the batch went to its file's account");
}

/// The official `anthropic` package (and `openai`, for the cross-protocol check) against the
/// proxy's Messages API, through `tests/anthropic_sdk.py`; what reached the provider is checked
/// here: Claude Code's headers verbatim beside the source's own key, tools as sent, the 529 that
/// was passed over, and each SDK's call translated to the other protocol's source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_anthropic_python_sdk_talks_to_the_proxy() {
    let Some(python) = python_with("anthropic, openai", "the_official_anthropic_python_sdk_talks_to_the_proxy") else {
        return;
    };
    // `claude-failover` starts at its overloaded source, then goes round; `claude-pushback` is
    // held off after its 429, on its own.
    let failover = support::claude_scope("claude-failover", "", &[("over", "overloaded"), ("b", "b")]).replacen(
        "[claude-failover]\n",
        "[claude-failover]\nselector = \"round_robin\"\n",
        1,
    );
    let scopes = [
        support::claude_scope("claude", "", &[("a", "a")]),
        failover,
        support::claude_scope("claude-pushback", "", &[("held", "pushback")]),
    ];
    let (r, echo) = support::start_claude(&scopes.concat()).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/anthropic_sdk.py");
    // The script's GATED stream: its first piece goes out, the rest a second after the request
    // reached the provider.
    let (provider, gate) = (r.provider.recording(), r.gate.clone());
    let releaser = tokio::spawn(async move {
        while !provider.all().iter().any(|q| q.last_text().contains("GATED")) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        gate.release_all();
    });
    let output = tokio::process::Command::new(&python).args([script, &r.url, support::KEY]).output().await.unwrap();
    releaser.abort();
    assert!(
        output.status.success(),
        "anthropic_sdk.py failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let one = |marker: &str| r.provider.saying(marker).into_iter().next().unwrap_or_else(|| panic!("no request said {marker}"));
    let header = |q: &gateway_mock::Received, name: &str| q.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let claude_code = one("CLAUDECODE");
    assert_eq!(
        header(&claude_code, "anthropic-beta").as_deref(),
        Some("claude-code-20250219,interleaved-thinking-2025-05-14"),
        "the betas verbatim"
    );
    assert_eq!(header(&claude_code, "x-app").as_deref(), Some("cli"));
    // The script prints the version its SDK sent.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let sdk_version = stdout.lines().find_map(|l| l.strip_prefix("anthropic-version sent: ")).map(str::to_owned);
    assert!(sdk_version.is_some(), "the script names the SDK's anthropic-version:\n{stdout}");
    assert_eq!(header(&claude_code, "anthropic-version"), sdk_version, "the SDK's own version, not the source's default");
    assert_eq!(header(&claude_code, "x-api-key").as_deref(), Some("sk-ant-a"), "the source's own key");
    assert_eq!(header(&claude_code, "authorization"), None, "the gateway key stays at the gateway");
    for q in r.provider.received() {
        let leaked = q.headers.iter().find(|(_, v)| v.to_str().is_ok_and(|v| v.contains(support::KEY)));
        assert!(leaked.is_none(), "the gateway key reached {}: {leaked:?}", q.path);
    }
    assert_eq!((claude_code.body["model"].as_str(), claude_code.body["stream"].as_bool()), (Some("claude-a"), Some(true)));
    assert!(claude_code.path.starts_with("/a/v1/messages"), "{}", claude_code.path);
    let tools = one("TOOLS please");
    assert_eq!(tools.body["tool_choice"], json!({"type": "tool", "name": "get_weather"}), "{}", tools.raw);
    assert_eq!(tools.body["tools"][0]["input_schema"]["required"], json!(["city"]), "{}", tools.raw);
    assert_eq!(tools.body["max_tokens"], 64);
    let counted = one("sixteen characters");
    assert!(counted.path.ends_with("/a/v1/messages/count_tokens"), "{}", counted.path);
    // The first failover call tried the overloaded source (a 529), then b; the SDK never retried.
    let tried = |prefix: &str| r.provider.saying("fail over").iter().filter(|q| q.path.starts_with(prefix)).count();
    assert!(tried("/overloaded/") >= 1, "a 529 was passed over");
    assert_eq!(tried("/b/"), 3, "b answered each failover call once");
    assert_eq!(r.provider.saying("PUSHBACK").len(), 1, "the 429 was not retried");
    // Across protocols: each SDK's call reached the other protocol's endpoint with that source's
    // key; what could not be carried reached neither provider.
    let to_anthropic = one("translated to anthropic");
    assert!(to_anthropic.path.ends_with("/a/v1/messages"), "{}", to_anthropic.path);
    assert_eq!(header(&to_anthropic, "x-api-key").as_deref(), Some("sk-ant-a"));
    let to_openai = echo.saying("translated to openai").into_iter().next().expect("the anthropic SDK's call reached Echo");
    assert!(to_openai.path.ends_with("/mock/v1/chat/completions"), "{}", to_openai.path);
    assert_eq!(header(&to_openai, "authorization").as_deref(), Some("Bearer sk-upstream-secret"));
    assert_eq!(header(&to_openai, "x-api-key"), None, "no Anthropic header at an OpenAI source");
    assert_eq!(echo.saying("TOOLS translated")[0].body["tools"][0]["function"]["name"], "get_weather");
    let refused = |q: &gateway_mock::Received| ["two answers", "read this"].contains(&q.last_text().as_str());
    assert!(!r.provider.received().iter().chain(&echo.received()).any(refused), "a refused call reached a provider");
}
