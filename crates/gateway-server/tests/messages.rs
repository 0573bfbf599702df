//! Anthropic's Messages API through the proxy, against gateway-mock's `Claude` provider: whole
//! and streamed calls in Anthropic's own shapes, the caller's `anthropic-*` and `x-app` headers
//! reaching the provider (betas a source refuses left out), the source's key in `x-api-key`, a
//! failure before the commit point switching source unseen, a break after it an Anthropic error
//! event, token counts, errors in Anthropic's shape, each protocol served by the other through
//! translation, and a request the other cannot express refused by name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use support::{KEY, claude_scope, events, header, start_claude};

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn messages(url: &str, body: Value, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = client().post(format!("{url}/v1/messages")).header("x-api-key", KEY).json(&body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

fn ask(model: &str, text: &str) -> Value {
    json!({"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": text}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_is_served_whole_with_the_sources_key_model_and_the_callers_headers() {
    let (r, _echo) = start_claude(&claude_scope("claude", "drop_betas = [\"refused-beta\"]", &[("a", "a")])).await;
    let whole = messages(&r.url, ask("claude", "hello"), &[("anthropic-beta", "tools-2024,refused-beta"), ("x-app", "cli")]).await;
    assert_eq!(whole.status(), 200);
    assert_eq!(header(&whole, "x-gateway-source"), "a");
    assert_eq!(header(&whole, "x-request-id"), "req_mock_0", "Anthropic's request-id is passed on");
    let body: Value = whole.json().await.unwrap();
    assert_eq!((body["type"].as_str(), body["content"][0]["text"].as_str()), (Some("message"), Some("echo: hello")));
    let seen = &r.provider.received()[0];
    assert_eq!(seen.body["model"], "claude-a", "the gateway sets model per source");
    assert_eq!(seen.body["max_tokens"], 64);
    let sent = |name: &str| seen.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    assert_eq!(sent("x-api-key").as_deref(), Some("sk-ant-a"), "the source's own key, never the gateway's");
    assert_eq!(sent("authorization"), None);
    assert_eq!(sent("anthropic-version").as_deref(), Some("2023-06-01"), "the source's default version");
    assert_eq!(sent("anthropic-beta").as_deref(), Some("tools-2024"), "a beta the source refuses is left out");
    assert_eq!(sent("x-app").as_deref(), Some("cli"));

    let versioned = messages(&r.url, ask("claude", "again"), &[("anthropic-version", "2023-01-01"), ("authorization", "Bearer x")]).await;
    assert_eq!(versioned.status(), 200, "x-api-key is the gateway key; an Authorization beside it is not read");
    let seen = r.provider.saying("again").pop().unwrap();
    assert_eq!(seen.headers.get("anthropic-version").unwrap(), "2023-01-01", "the caller's version passes verbatim");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_relayed_in_anthropics_named_events_and_its_usage_counted() {
    let (r, _echo) = start_claude(&claude_scope("claude", "", &[("a", "a")])).await;
    let streamed = messages(
        &r.url,
        json!({"model": "claude", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "TOOLS please"}]}]}),
        &[],
    )
    .await;
    assert_eq!(header(&streamed, "content-type"), "text/event-stream");
    let text = streamed.text().await.unwrap();
    assert!(!text.contains("[DONE]"), "a Messages stream has no [DONE]");
    let events = events(&text);
    assert_eq!(events[0].0, "message_start");
    assert_eq!(events.last().map(|e| e.0.as_str()), Some("message_stop"));
    for (name, data) in &events {
        assert_eq!(data["type"].as_str(), Some(name.as_str()), "{data}");
    }
    let json: String = events.iter().filter_map(|(_, d)| d["delta"]["partial_json"].as_str()).collect();
    assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), json!({"city": "Paris"}), "tool input pieces pass whole");
    assert_eq!(r.provider.received()[0].body["stream"], true);
    let metrics = client().get(format!("{}/metrics", r.url)).bearer_auth(KEY).send().await.unwrap().text().await.unwrap();
    // Input 12 with 1 written to and 2 read from the cache; output 3 from message_delta.
    for (direction, tokens) in [("input", 15), ("output", 3)] {
        let line = format!("llm_tokens_total{{scope=\"claude\",tenant_id=\"\",source=\"a\",direction=\"{direction}\"}} {tokens}");
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overloaded_source_is_passed_over_unseen_whole_and_streamed() {
    let (r, _echo) = start_claude(&claude_scope("claude", "", &[("a", "overloaded"), ("b", "b")])).await;
    for _ in 0..2 {
        let whole = messages(&r.url, ask("claude", "hi"), &[]).await;
        assert_eq!(whole.status(), 200);
        // (The selector may try `a` again before it has evidence that `b` does better.)
        let attempts: u32 = header(&whole, "x-gateway-attempts").parse().unwrap();
        assert_eq!(header(&whole, "x-gateway-source"), "b");
        assert!((1..=4).contains(&attempts), "{attempts}");
    }
    let (r, _echo) = start_claude(&claude_scope("claude", "", &[("a", "prefail"), ("b", "b")])).await;
    let mut streamed = json!({"stream": true});
    streamed.as_object_mut().unwrap().extend(ask("claude", "hello").as_object().unwrap().clone());
    for _ in 0..3 {
        // (Past `keepalive_s` the answer's head went out before the source was known.)
        let response = messages(&r.url, streamed.clone(), &[]).await;
        let events = events(&response.text().await.unwrap());
        assert_eq!(events[0].1["message"]["model"], "claude-b", "b served it");
        assert_eq!(events.iter().filter(|(name, _)| name == "message_start").count(), 1, "the failed attempt's start was never sent");
        assert!(events.iter().all(|(name, _)| name != "error"));
        assert_eq!(events.last().map(|e| e.0.as_str()), Some("message_stop"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_break_after_the_commit_point_is_an_anthropic_error_event() {
    let (r, _echo) = start_claude(&claude_scope("claude", "", &[("a", "a")])).await;
    let mut body = ask("claude", "CUT here");
    body["stream"] = json!(true);
    let text = messages(&r.url, body, &[]).await.text().await.unwrap();
    let events = events(&text);
    assert!(events.iter().any(|(name, data)| name == "content_block_delta" && data["delta"]["text"].is_string()));
    let (name, error) = events.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(error["type"], "error");
    assert!(error["error"]["type"].is_string() && error["error"]["message"].as_str().is_some_and(|m| m.contains("a")), "{error}");
    assert!(!events.iter().any(|(name, _)| name == "message_stop"), "never a clean-looking end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_counted_by_the_provider() {
    let (r, _echo) = start_claude(&claude_scope("claude", "", &[("a", "a")])).await;
    let response = client()
        .post(format!("{}/v1/messages/count_tokens", r.url))
        .bearer_auth(KEY)
        .json(&json!({"model": "claude", "messages": [{"role": "user", "content": "sixteen characters"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().await.unwrap(), json!({"input_tokens": 4}));
    assert!(r.provider.received()[0].path.ends_with("/a/v1/messages/count_tokens"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_come_in_anthropics_shape() {
    let (r, _echo) = start_claude(&claude_scope("claude", "", &[("a", "a")])).await;
    let error = |status: u16, kind: &str, body: Value| {
        assert_eq!(body["type"], "error", "{body}");
        assert_eq!(body["error"]["type"], kind, "{status}: {body}");
        assert!(body["error"]["message"].is_string());
    };
    let unknown = messages(&r.url, ask("no-such-scope", "hi"), &[]).await;
    assert_eq!(unknown.status(), 404);
    error(404, "not_found_error", unknown.json().await.unwrap());
    let keyless = client().post(format!("{}/v1/messages", r.url)).json(&ask("claude", "hi")).send().await.unwrap();
    assert_eq!(keyless.status(), 401);
    error(401, "authentication_error", keyless.json().await.unwrap());
    let no_messages = messages(&r.url, json!({"model": "claude", "max_tokens": 1}), &[]).await;
    assert_eq!(no_messages.status(), 400);
    let body: Value = no_messages.json().await.unwrap();
    error(400, "invalid_request_error", body.clone());
    assert!(body["error"]["message"].as_str().unwrap().contains("messages"), "{body}");
    // The provider's own refusal passes as it came, never reaching the breaker.
    let refused = messages(&r.url, json!({"model": "claude", "messages": [{"role": "user", "content": "no limit"}]}), &[]).await;
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["message"], "max_tokens: Field required");
    let pushed = messages(&r.url, ask("claude", "PUSHBACK"), &[]).await;
    assert_eq!(pushed.status(), 429);
    assert!(header(&pushed, "retry-after").parse::<u64>().is_ok_and(|s| s > 0));
    error(429, "rate_limit_error", pushed.json().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_protocol_is_served_by_the_other_through_translation() {
    let (r, echo) = start_claude(&claude_scope("claude", "", &[("a", "a")])).await;
    // A Messages call to the test config's `chat` scope, whose source is OpenAI's (Echo).
    let to_openai = messages(&r.url, ask("chat", "hi"), &[]).await;
    assert_eq!(to_openai.status(), 200);
    let body: Value = to_openai.json().await.unwrap();
    assert_eq!((body["type"].as_str(), body["content"][0]["text"].as_str()), (Some("message"), Some("echo: hi")), "{body}");
    assert_eq!(body["stop_reason"], "end_turn");
    let seen = echo.saying("hi").pop().unwrap();
    assert!(seen.path.ends_with("/chat/completions"), "{}", seen.path);
    assert_eq!((seen.body["max_completion_tokens"].as_u64(), seen.body["messages"][0]["content"].as_str()), (Some(64), Some("hi")));
    let mut streamed = ask("chat", "streamed hi");
    streamed["stream"] = json!(true);
    let events = events(&messages(&r.url, streamed, &[]).await.text().await.unwrap());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first().copied(), Some("message_start"));
    assert_eq!(names.last().copied(), Some("message_stop"));
    let text: String = events.iter().filter_map(|(_, d)| d["delta"]["text"].as_str()).collect();
    assert_eq!(text, "echo: streamed hi");

    // A chat completion to an Anthropic scope.
    let chat = |body: Value| client().post(format!("{}/v1/chat/completions", r.url)).bearer_auth(KEY).json(&body).send();
    let to_anthropic =
        chat(json!({"model": "claude", "messages": [{"role": "system", "content": "brief"}, {"role": "user", "content": "hello"}]}))
            .await
            .unwrap();
    assert_eq!(to_anthropic.status(), 200);
    let body: Value = to_anthropic.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["content"], "echo: hello");
    assert_eq!(body["usage"]["prompt_tokens"], 15, "input with the cache's tokens: {body}");
    let seen = r.provider.saying("hello").pop().unwrap();
    assert_eq!(
        (seen.body["system"].as_str(), seen.body["max_tokens"].as_u64()),
        (Some("brief"), Some(4096)),
        "a scope default for max_tokens"
    );
    let streamed = chat(json!({"model": "claude", "stream": true, "messages": [{"role": "user", "content": "TOOLS now"}],
                               "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]}))
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    assert!(streamed.trim_end().ends_with("data: [DONE]"), "{streamed}");
    let arguments: String = streamed
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&arguments).unwrap(), json!({"city": "Paris"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_other_protocol_cannot_express_is_refused_by_name() {
    let (r, _echo) = start_claude(&claude_scope("claude", "", &[("a", "a")])).await;
    let refused = client()
        .post(format!("{}/v1/chat/completions", r.url))
        .bearer_auth(KEY)
        .json(&json!({"model": "claude", "n": 2, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["param"], "model", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("a (anthropic): n > 1"), "{message}");
    let document =
        json!({"model": "chat", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]});
    let refused = messages(&r.url, document, &[]).await;
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("mock (openai): a content block of type document"), "{body}");
    assert!(r.provider.received().is_empty(), "nothing reached a provider");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_input_that_never_closes_is_relayed_as_it_came_natively_and_translated() {
    let (r, _echo) = start_claude(&claude_scope("claude", "", &[("a", "a")])).await;
    let mut body = ask("claude", "NEVERCLOSE");
    body["stream"] = json!(true);
    let events = events(&messages(&r.url, body, &[]).await.text().await.unwrap());
    let pieces: String = events.iter().filter_map(|(_, d)| d["delta"]["partial_json"].as_str()).collect();
    assert!(serde_json::from_str::<Value>(&pieces).is_err(), "the pieces as they came: {pieces}");
    assert_eq!(events.last().map(|e| e.0.as_str()), Some("message_stop"));
    let chat = json!({"model": "claude", "stream": true, "messages": [{"role": "user", "content": "NEVERCLOSE"}]});
    let text =
        client().post(format!("{}/v1/chat/completions", r.url)).bearer_auth(KEY).json(&chat).send().await.unwrap().text().await.unwrap();
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    assert!(text.contains("\"finish_reason\":\"tool_calls\""), "{text}");
}
