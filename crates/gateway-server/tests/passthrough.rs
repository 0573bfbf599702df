//! The whole OpenAI API through the proxy, in Rust (the SDK test drives the same cases from
//! Python): what the caller sends reaches the provider verbatim but for `model`, and what the
//! provider answers reaches the caller unchanged. Tools and a tool round trip, image and audio
//! parts, JSON modes, sampling fields and unknown ones, `n`, logprobs, finish reasons, usage
//! details, a refusal (not retried), a provider's 400, embeddings options, models by id.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use support::{KEY, Running};

async fn post(r: &Running, path: &str, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new().post(format!("{}{path}", r.url)).bearer_auth(KEY).json(body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

fn chat_with(text: &str, extra: Value) -> Value {
    let mut body = json!({"model": "chat", "messages": [{"role": "user", "content": text}]});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_a_tool_round_trip_and_parts_pass_both_ways() {
    let r = support::start().await;
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
    let choice = json!({"type": "function", "function": {"name": "get_weather"}});
    let (status, called) = post(&r, "/v1/chat/completions", &chat_with("TOOLS", json!({"tools": tools, "tool_choice": choice}))).await;
    assert_eq!(status, 200, "a tool call is a usable answer, not an empty one: {called}");
    assert_eq!(called["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
    assert_eq!(called["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(r.provider.saying("TOOLS").len(), 1, "answered once, never retried");
    let upstream = &r.provider.saying("TOOLS")[0].body;
    assert_eq!((&upstream["tools"], &upstream["tool_choice"]), (&tools, &choice));
    let follow = json!({"model": "chat", "messages": [
        {"role": "user", "content": "TOOLS"},
        called["choices"][0]["message"],
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
    ]});
    let (status, answered) = post(&r, "/v1/chat/completions", &follow).await;
    assert_eq!((status, answered["choices"][0]["message"]["content"].as_str()), (200, Some("echo: sunny")));
    let parts = json!([{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                       {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "mp3"}}]);
    let (status, _) = post(&r, "/v1/chat/completions", &json!({"model": "chat", "messages": [{"role": "user", "content": parts}]})).await;
    assert_eq!(status, 200);
    assert_eq!(r.provider.saying("look")[0].body["messages"][0]["content"], parts);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_field_arrives_verbatim_and_the_answer_comes_back_whole() {
    let r = support::start().await;
    let extra = json!({"temperature": 0.2, "top_p": 0.9, "n": 2, "stop": ["END"], "seed": 42, "logprobs": true, "user": "u-1",
                       "metadata": {"k": "v"}, "max_completion_tokens": 50, "vendor_knob": {"deep": [1, 2]}});
    let (status, answer) = post(&r, "/v1/chat/completions", &chat_with("FIELDS", extra.clone())).await;
    assert_eq!(status, 200);
    let seen = &r.provider.saying("FIELDS")[0];
    assert!(seen.raw.contains("\"temperature\":0.2,"), "{}", seen.raw);
    for (field, value) in extra.as_object().unwrap() {
        assert_eq!(&seen.body[field], value, "{field}");
    }
    assert_eq!(seen.body["model"], "m", "model is the source's");
    assert_eq!(answer["choices"].as_array().map(Vec::len), Some(2), "both choices: {answer}");
    assert_eq!(answer["choices"][0]["logprobs"]["content"][0]["token"], "echo");
    assert_eq!((answer["system_fingerprint"].as_str(), answer["service_tier"].as_str()), (Some("fp_mock"), Some("default")));
    assert_eq!(answer["usage"]["prompt_tokens_details"]["cached_tokens"], 1, "usage details kept");
    let (_, length) = post(&r, "/v1/chat/completions", &chat_with("LENGTH", json!({}))).await;
    assert_eq!(length["choices"][0]["finish_reason"], "length");
    let (status, refused) = post(&r, "/v1/chat/completions", &chat_with("REFUSE", json!({}))).await;
    assert_eq!((status, refused["choices"][0]["message"]["refusal"].as_str()), (200, Some("I can't help with that.")));
    assert_eq!(r.provider.saying("REFUSE").len(), 1, "a refusal is an answer, not retried");
    for format in
        [json!({"type": "json_object"}), json!({"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}})]
    {
        let (status, answer) = post(&r, "/v1/chat/completions", &chat_with("JSON", json!({"response_format": format}))).await;
        assert_eq!((status, answer["choices"][0]["message"]["content"].as_str()), (200, Some("{\"answer\": \"echo\"}")));
        assert_eq!(r.provider.saying("JSON").last().unwrap().body["response_format"], format, "the JSON mode reached the provider");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_own_400_reaches_the_caller_as_it_came() {
    let r = support::start().await;
    let (status, body) = post(&r, "/v1/chat/completions", &chat_with("BAD400", json!({"temperature": 3}))).await;
    assert_eq!(status, 400);
    assert_eq!(
        body,
        json!({"error": {"message": "Invalid 'temperature': decimal above maximum value.", "type": "invalid_request_error", "param": "temperature", "code": "decimal_above_max_value"}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_pass_dimensions_base64_and_token_arrays() {
    let r = support::start().await;
    let (status, shaped) = post(&r, "/v1/embeddings", &json!({"model": "chat", "input": ["a"], "dimensions": 6})).await;
    assert_eq!((status, shaped["data"][0]["embedding"].as_array().map(Vec::len)), (200, Some(6)));
    let (_, b64) = post(&r, "/v1/embeddings", &json!({"model": "chat", "input": "a", "encoding_format": "base64"})).await;
    assert_eq!(b64["data"][0]["embedding"], "AAAAPwAAgL8AAABA", "vectors are not decoded and re-encoded");
    let (status, tokens) = post(&r, "/v1/embeddings", &json!({"model": "chat", "input": [[1, 2, 3], [4]]})).await;
    assert_eq!((status, tokens["data"].as_array().map(Vec::len)), (200, Some(2)));
    let seen: Vec<_> = r.provider.received().into_iter().filter(|s| s.path.ends_with("/embeddings")).map(|s| s.body).collect();
    assert_eq!(seen[0]["dimensions"], 6);
    assert_eq!(seen[1]["encoding_format"], "base64");
    assert_eq!(seen[2]["input"], json!([[1, 2, 3], [4]]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_is_found_by_its_id() {
    let r = support::start().await;
    let http = reqwest::Client::new();
    let found: Value = http.get(format!("{}/v1/models/chat", r.url)).bearer_auth(KEY).send().await.unwrap().json().await.unwrap();
    assert_eq!((found["id"].as_str(), found["object"].as_str()), (Some("chat"), Some("model")));
    let missing = http.get(format!("{}/v1/models/gpt-9", r.url)).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(missing.json::<Value>().await.unwrap()["error"]["code"], "model_not_found");
}

/// The provider's JSON reaches the caller as the provider wrote it, not written again from its
/// parsed value: a double that serde_json's default parser reads one bit off, an integer past
/// 64 bits, numbers in exponent form, escapes, spacing and key order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_comes_back_byte_for_byte() {
    const TEXT: &str = concat!(
        "{\"id\": \"chatcmpl-1\",\"object\":\"chat.completion\",  \"choices\":[{\"index\":0,",
        "\"message\":{\"role\":\"assistant\",\"content\":\"caf\\u00e9 \\/ ok\"},\"finish_reason\":\"stop\",",
        "\"logprobs\":{\"content\":[{\"token\":\"ok\",\"logprob\":-0.00000012874319}]}}],",
        "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"total_tokens\":6},",
        "\"z\":[2.5e-3, 1.0, 0.30000000000000004, 12345678901234567890123, 7.3177e-05]}\n"
    );
    let r = support::start_answering(|_| gateway_mock::Answer::json_text(200, TEXT)).await;
    let body = json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]});
    let response = reqwest::Client::new().post(format!("{}/v1/chat/completions", r.url)).bearer_auth(KEY).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert_eq!(response.headers()["x-gateway-source"], "mock");
    assert_eq!(response.text().await.unwrap(), TEXT);
}

/// What the gateway leaves out of the caller's body (a `stream` it answers itself) leaves the
/// other fields in the caller's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_keeps_the_callers_order() {
    let r = support::start().await;
    let body =
        json!({"model": "chat", "stream": false, "messages": [{"role": "user", "content": "ORDER"}], "temperature": 0.5, "zz_last": 1});
    let (status, _) = post(&r, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200);
    let upstream = &r.provider.saying("ORDER")[0].body;
    let keys: Vec<&str> = upstream.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["model", "messages", "temperature", "zz_last"]);
    assert_eq!(upstream["model"], "m", "the source's model, where the caller's was");
}
