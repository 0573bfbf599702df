//! The rest of OpenAI's surface through the proxy, against gateway-mock's `Surface` provider:
//! legacy completions (whole and streamed), moderations, images (JSON and a multipart edit),
//! transcripts (JSON and text), speech (bytes that are not UTF-8, unchanged), files and a batch
//! that follows its input file to its source, and what the gateway refuses with a clear status:
//! the Realtime API and listings (501), streams of kinds it does not stream, forms without their
//! file, uploads whose scope is ambiguous.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use support::{KEY, start_surface, surface_scope};

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn post(url: &str, path: &str, body: Value) -> reqwest::Response {
    client().post(format!("{url}{path}")).bearer_auth(KEY).json(&body).send().await.unwrap()
}

async fn upload(url: &str, path: &str, form: reqwest::multipart::Form) -> reqwest::Response {
    client().post(format!("{url}{path}")).bearer_auth(KEY).multipart(form).send().await.unwrap()
}

fn file(name: &str, bytes: &[u8]) -> reqwest::multipart::Part {
    reqwest::multipart::Part::bytes(bytes.to_vec()).file_name(name.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_moderations_images_and_audio_pass_through() {
    let (r, _) = start_surface(&surface_scope("media", "", &[("a", "a")])).await;
    let whole: Value =
        post(&r.url, "/v1/completions", json!({"model": "media", "prompt": "say hi", "max_tokens": 5})).await.json().await.unwrap();
    assert_eq!(whole["choices"][0]["text"], "echo: say hi");
    let text = post(&r.url, "/v1/completions", json!({"model": "media", "prompt": "say hi", "stream": true})).await.text().await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let pieces: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: ").filter(|d| *d != "[DONE]"))
        .map(|d| serde_json::from_str::<Value>(d).unwrap()["choices"][0]["text"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(pieces, "echo: say hi");
    let flagged: Value = post(&r.url, "/v1/moderations", json!({"model": "media", "input": "HATE"})).await.json().await.unwrap();
    assert_eq!(flagged["results"][0]["flagged"], true);
    let image: Value =
        post(&r.url, "/v1/images/generations", json!({"model": "media", "prompt": "a fox", "size": "256x256"})).await.json().await.unwrap();
    assert!(image["data"][0]["b64_json"].is_string());
    assert_eq!(r.provider.received().iter().find(|q| q.path.ends_with("/images/generations")).unwrap().body["size"], "256x256");

    let form = reqwest::multipart::Form::new()
        .text("model", "media")
        .text("prompt", "blue")
        .part("image[]", file("a.png", b"A"))
        .part("image[]", file("b.png", b"B"));
    let edited: Value = upload(&r.url, "/v1/images/edits", form).await.json().await.unwrap();
    assert!(edited["data"][0]["b64_json"].is_string(), "{edited}");
    let sent = r.provider.received().into_iter().find(|q| q.path.ends_with("/images/edits")).unwrap();
    let parts: Vec<(String, Option<String>)> = sent.form().unwrap().into_iter().map(|p| (p.name, p.filename)).collect();
    assert_eq!(parts[0], ("model".to_owned(), None), "the source's model first");
    assert_eq!(sent.form_value("model").as_deref(), Some("m-a"));
    assert_eq!(parts.iter().filter(|(n, _)| n == "image[]").count(), 2, "several images, each as sent");

    let audio = b"RIFF\x00\x01\xff\xfe";
    let form = reqwest::multipart::Form::new().text("model", "media").text("response_format", "text").part("file", file("a.wav", audio));
    let transcript = upload(&r.url, "/v1/audio/transcriptions", form).await;
    assert_eq!(transcript.headers()["content-type"], "text/plain; charset=utf-8", "a transcript as text keeps its type");
    assert_eq!(transcript.text().await.unwrap(), "transcript of 8 bytes of a.wav\n");
    let spoken =
        post(&r.url, "/v1/audio/speech", json!({"model": "media", "voice": "alloy", "input": "hello", "response_format": "wav"})).await;
    assert_eq!(spoken.headers()["content-type"], "audio/wav");
    assert_eq!(spoken.bytes().await.unwrap().to_vec(), gateway_mock::speech_bytes("hello"), "the audio's bytes, unchanged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_is_relayed_as_it_comes_past_the_answer_budget_and_a_break_breaks_the_connection() {
    let (r, _) = support::start_surface_with("max_response_bytes = 4096", &surface_scope("media", "", &[("a", "a")])).await;
    let input = "a long sentence to speak aloud ".repeat(4_000);
    let spoken = post(&r.url, "/v1/audio/speech", json!({"model": "media", "voice": "alloy", "input": input})).await;
    assert_eq!(spoken.status(), 200);
    assert_eq!(
        (spoken.headers()["content-type"].to_str().unwrap(), spoken.headers()["x-gateway-source"].to_str().unwrap()),
        ("audio/mpeg", "a")
    );
    let audio = spoken.bytes().await.unwrap();
    assert_eq!(audio.len(), gateway_mock::speech_bytes(&input).len(), "{} bytes through a budget of 4096: relayed, not held", audio.len());
    assert_eq!(audio.to_vec(), gateway_mock::speech_bytes(&input));
    // A provider that breaks after the first piece: the caller's read fails, no short file
    // that looks whole.
    let cut = post(&r.url, "/v1/audio/speech", json!({"model": "media", "voice": "alloy", "input": format!("CUT {input}")})).await;
    assert_eq!(cut.status(), 200, "the first piece went out");
    assert!(cut.bytes().await.is_err(), "the body ends broken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_and_its_batch_stay_on_the_source_that_took_the_file() {
    let (r, _) = start_surface(&surface_scope("jobs", "", &[("a", "a"), ("b", "b")])).await;
    let lines = "{\"custom_id\": \"r0\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", \"body\": {\"messages\": [{\"role\": \"user\", \"content\": \"q0\"}]}}\n";
    let form = reqwest::multipart::Form::new().text("purpose", "batch").part("file", file("in.jsonl", lines.as_bytes()));
    let uploaded: Value = upload(&r.url, "/v1/files", form).await.json().await.unwrap();
    let id = uploaded["id"].as_str().unwrap().to_owned();
    let account = id.split('-').nth(1).unwrap().to_owned();
    for _ in 0..4 {
        // Whatever the selector would pick, the batch goes where its file is.
        let batch =
            post(&r.url, "/v1/batches", json!({"input_file_id": id, "endpoint": "/v1/chat/completions", "completion_window": "24h"})).await;
        assert_eq!(batch.status(), 200);
        let batch: Value = batch.json().await.unwrap();
        assert_eq!(batch["id"].as_str().unwrap().split('_').nth(1), Some(account.as_str()));
    }
    let batches = r.provider.received().iter().filter(|q| q.path.ends_with("/batches")).count();
    assert_eq!(batches, 4);
    let content = client().get(format!("{}/v1/files/{id}/content", r.url)).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(content.bytes().await.unwrap(), lines.as_bytes());
    // A file of one JSON line, labelled JSON by the provider: its bytes, not JSON written anew.
    let spaced = "{\"a\":   1,  \"b\": [ 2 ]}\n";
    let form = reqwest::multipart::Form::new().text("purpose", "user_data").part("file", file("one.jsonl", spaced.as_bytes()));
    let one: Value = upload(&r.url, "/v1/files", form).await.json().await.unwrap();
    let read = client().get(format!("{}/v1/files/{}/content", r.url, one["id"].as_str().unwrap())).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(read.bytes().await.unwrap(), spaced.as_bytes(), "byte for byte");
    let gone = client().delete(format!("{}/v1/files/{id}", r.url)).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(gone.status(), 200);
    let unknown = client().get(format!("{}/v1/files/{id}", r.url)).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(unknown.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_gateway_does_not_serve_is_refused_clearly() {
    let scopes = format!("{}{}", surface_scope("one", "", &[("a", "a")]), surface_scope("two", "", &[("b", "b")]));
    let (r, _) = start_surface(&scopes).await;
    let realtime = client().get(format!("{}/v1/realtime?model=gpt-realtime", r.url)).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(realtime.status(), 501);
    assert_eq!(realtime.headers()["x-should-retry"], "false", "the SDKs would retry a 5xx");
    let error: Value = realtime.json().await.unwrap();
    assert!(error["error"]["message"].as_str().unwrap().contains("/v1/realtime"), "{error}");
    let listing = client().get(format!("{}/v1/files", r.url)).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(listing.status(), 501);
    let streamed = post(&r.url, "/v1/images/generations", json!({"model": "one", "prompt": "x", "stream": true})).await;
    let error: Value = streamed.json().await.unwrap();
    assert_eq!(error["error"]["param"], "stream");
    let no_file = upload(&r.url, "/v1/audio/transcriptions", reqwest::multipart::Form::new().text("model", "one")).await;
    let error: Value = no_file.json().await.unwrap();
    assert_eq!(error["error"]["param"], "file");
    let not_a_form = post(&r.url, "/v1/audio/translations", json!({"model": "one"})).await;
    let error: Value = not_a_form.json().await.unwrap();
    assert_eq!(error["error"]["param"], "content-type");
    // Two scopes serve files: an upload must say which.
    let form = || reqwest::multipart::Form::new().text("purpose", "batch").part("file", file("f.jsonl", b"{}"));
    let ambiguous = upload(&r.url, "/v1/files", form()).await;
    let error: Value = ambiguous.json().await.unwrap();
    assert_eq!(error["error"]["param"], "x-gateway-scope", "{error}");
    let named = client()
        .post(format!("{}/v1/files", r.url))
        .bearer_auth(KEY)
        .header("x-gateway-scope", "two")
        .multipart(form())
        .send()
        .await
        .unwrap();
    let made: Value = named.json().await.unwrap();
    assert!(made["id"].as_str().unwrap().starts_with("file-b-"), "{made}");
    assert_eq!(r.provider.received().len(), 1, "only the named upload reached a provider");
}
