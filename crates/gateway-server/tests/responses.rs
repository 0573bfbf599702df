//! The Responses API through the proxy, against gateway-mock's stateful `Surface` provider (one
//! account per source): whole and streamed calls, a failure before the commit point switching
//! source unseen (the client's `response.created` is the serving attempt's, numbered from 0),
//! chains that stay on their first turn's source (and a clear error when it is down), a stored
//! response's routes, background responses polled to their end, a stream resumed, structured
//! calls, and the ids the gateway refuses.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use support::{KEY, events, header, start_surface, surface_scope};

async fn post(url: &str, path: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new().post(format!("{url}{path}")).bearer_auth(KEY).json(&body).send().await.unwrap()
}

async fn get(url: &str, path: &str) -> reqwest::Response {
    reqwest::Client::new().get(format!("{url}{path}")).bearer_auth(KEY).send().await.unwrap()
}

fn output_text(response: &Value) -> String {
    response["output"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|item| item["content"].as_array().into_iter().flatten())
        .filter_map(|p| p["text"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_is_served_whole_and_streamed_in_named_events_numbered_from_zero() {
    let (r, _) = start_surface(&surface_scope("resp", "", &[("a", "a")])).await;
    let whole = post(&r.url, "/v1/responses", json!({"model": "resp", "input": "hi"})).await;
    assert_eq!(whole.status(), 200);
    assert_eq!(header(&whole, "x-gateway-source"), "a");
    let body: Value = whole.json().await.unwrap();
    assert_eq!(body["id"], "resp_a_1", "ids pass unchanged");
    assert_eq!(output_text(&body), "echo: hi (turn 1)");
    assert_eq!(r.provider.received()[0].body["model"], "m-a", "the gateway sets model per source");

    let streamed = post(&r.url, "/v1/responses", json!({"model": "resp", "input": "hello", "stream": true})).await;
    assert_eq!(header(&streamed, "content-type"), "text/event-stream");
    let text = streamed.text().await.unwrap();
    assert!(!text.contains("[DONE]"), "a Responses stream has no [DONE]");
    let events = events(&text);
    assert_eq!(events[0].0, "response.created");
    assert_eq!(events.last().map(|e| e.0.as_str()), Some("response.completed"));
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!((data["type"].as_str(), data["sequence_number"].as_u64()), (Some(name.as_str()), Some(i as u64)), "{data}");
    }
    assert_eq!(events[0].1["response"]["id"], events.last().unwrap().1["response"]["id"], "created and completed name one response");
    assert_eq!(events.last().unwrap().1["response"]["usage"]["total_tokens"], 7);
    // The usage of the whole answer and of the stream's terminal event reached the metrics.
    let metrics = get(&r.url, "/metrics").await.text().await.unwrap();
    for (direction, tokens) in [("input", 10), ("output", 4)] {
        let line = format!("llm_tokens_total{{scope=\"resp\",tenant_id=\"\",source=\"a\",direction=\"{direction}\"}} {tokens}");
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_before_the_commit_point_switches_source_unseen() {
    // Round robin tries `first` (an account whose streams break before their first delta) first.
    let scope = surface_scope("pair", "selector = \"round_robin\"", &[("first", "prefail"), ("second", "b")]);
    let (r, _) = start_surface(&scope).await;
    let streamed = post(&r.url, "/v1/responses", json!({"model": "pair", "input": "switch", "stream": true})).await;
    let events = events(&streamed.text().await.unwrap());
    assert_eq!(events[0].1["response"]["id"], "resp_b_1", "response.created is the serving attempt's");
    assert!(events.iter().enumerate().all(|(i, (_, e))| e["sequence_number"] == json!(i)), "0, 1, 2 … without a gap");
    assert_eq!(events.iter().filter(|(name, _)| name == "response.created").count(), 1);
    assert_eq!(events.last().map(|e| e.0.as_str()), Some("response.completed"));
    let paths: Vec<String> = r.provider.received().iter().map(|q| q.path.clone()).collect();
    assert_eq!(paths, ["/prefail/v1/responses", "/b/v1/responses"], "one attempt each");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_break_after_the_commit_point_ends_the_stream_with_an_error_event() {
    let (r, _) = start_surface(&surface_scope("resp", "", &[("a", "a")])).await;
    let text = post(&r.url, "/v1/responses", json!({"model": "resp", "input": "CUT here", "stream": true})).await.text().await.unwrap();
    let events = events(&text);
    let (name, last) = events.last().unwrap();
    assert_eq!(name, "error", "{text}");
    assert_eq!(
        (last["type"].as_str(), last["error"]["code"].as_str(), last["code"].as_str()),
        (Some("error"), Some("stream_broken"), Some("stream_broken")),
        "both shapes"
    );
    assert!(events.iter().any(|(name, _)| name == "response.output_text.delta"), "the delta went out before the break");
    assert_eq!(last["sequence_number"], json!(events.len() - 1), "the error event is numbered too");
    assert!(!events.iter().any(|(name, _)| name == "response.completed"), "never a clean-looking end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_stays_on_its_first_turns_source_and_fails_clearly_when_it_is_down() {
    let (r, surface) = start_surface(&surface_scope("chat", "", &[("a", "a"), ("b", "b"), ("c", "c")])).await;
    let first: Value = post(&r.url, "/v1/responses", json!({"model": "chat", "input": "one"})).await.json().await.unwrap();
    let id = first["id"].as_str().unwrap().to_owned();
    let account = id.split('_').nth(1).unwrap().to_owned();
    let mut previous = id.clone();
    for turn in 2..=3 {
        let next = post(&r.url, "/v1/responses", json!({"model": "chat", "input": "again", "previous_response_id": previous})).await;
        assert_eq!(header(&next, "x-gateway-source"), account, "turn {turn} on the first turn's source");
        let body: Value = next.json().await.unwrap();
        assert_eq!(output_text(&body), format!("echo: again (turn {turn})"), "the provider had the earlier turns");
        previous = body["id"].as_str().unwrap().to_owned();
    }
    surface.set_down(&account, true);
    let refused = post(&r.url, "/v1/responses", json!({"model": "chat", "input": "four", "previous_response_id": previous})).await;
    assert!(refused.status().is_server_error(), "{}", refused.status());
    let error: Value = refused.json().await.unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("only source {account} holds previous_response_id {previous}")), "{message}");
    let others = r.provider.received().iter().filter(|q| q.body["input"] == "four" && !q.path.starts_with(&format!("/{account}/"))).count();
    assert_eq!(others, 0, "never sent to an account that lacks the context");
    // A call with no prior state fails over freely.
    let free = post(&r.url, "/v1/responses", json!({"model": "chat", "input": "fresh"})).await;
    assert_eq!(free.status(), 200);
    assert_ne!(header(&free, "x-gateway-source"), account);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_response_is_read_listed_deleted_and_forgotten_where_it_lives() {
    let (r, _) = start_surface(&surface_scope("resp", "", &[("a", "a"), ("b", "b")])).await;
    let made: Value = post(&r.url, "/v1/responses", json!({"model": "resp", "input": "keep me"})).await.json().await.unwrap();
    let id = made["id"].as_str().unwrap();
    let read: Value = get(&r.url, &format!("/v1/responses/{id}")).await.json().await.unwrap();
    assert_eq!(read, made);
    let items: Value = get(&r.url, &format!("/v1/responses/{id}/input_items?limit=5&order=asc")).await.json().await.unwrap();
    assert_eq!(items["data"][0]["content"][0]["text"], "keep me");
    assert!(r.provider.received().iter().any(|q| q.query == "limit=5&order=asc"), "the query passes on");
    let deleted = reqwest::Client::new().delete(format!("{}/v1/responses/{id}", r.url)).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(deleted.status(), 200);
    let gone = get(&r.url, &format!("/v1/responses/{id}")).await;
    assert_eq!(gone.status(), 404);
    let error: Value = gone.json().await.unwrap();
    assert_eq!(error["error"]["message"], format!("Response with id '{id}' not found."));
    assert_eq!(r.provider.received().iter().filter(|q| q.method == "GET").count(), 2, "the gateway answered the forgotten id itself");
    // A turn continuing a response nobody holds: what OpenAI answers.
    let orphan = post(&r.url, "/v1/responses", json!({"model": "resp", "input": "x", "previous_response_id": id})).await;
    assert_eq!(orphan.status(), 400);
    let error: Value = orphan.json().await.unwrap();
    assert_eq!(
        (error["error"]["code"].as_str(), error["error"]["param"].as_str()),
        (Some("previous_response_not_found"), Some("previous_response_id"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_response_is_polled_to_its_end_and_its_stream_resumed() {
    let (r, _) = start_surface(&surface_scope("resp", "", &[("a", "a"), ("b", "b")])).await;
    let queued: Value =
        post(&r.url, "/v1/responses", json!({"model": "resp", "input": "later", "background": true})).await.json().await.unwrap();
    assert_eq!((queued["status"].as_str(), queued["background"].as_bool()), (Some("queued"), Some(true)));
    let id = queued["id"].as_str().unwrap();
    let mut statuses = Vec::new();
    loop {
        let polled: Value = get(&r.url, &format!("/v1/responses/{id}")).await.json().await.unwrap();
        statuses.push(polled["status"].as_str().unwrap().to_owned());
        if !matches!(statuses.last().map(String::as_str), Some("queued" | "in_progress")) {
            assert_eq!(output_text(&polled), "echo: later (turn 1)");
            break;
        }
    }
    assert_eq!(statuses, ["in_progress", "completed"]);
    let resumed = get(&r.url, &format!("/v1/responses/{id}?stream=true&starting_after=3")).await;
    let events = events(&resumed.text().await.unwrap());
    assert_eq!(events[0].1["sequence_number"], 4, "the provider's numbers, from starting_after");
    assert_eq!(events.last().map(|e| e.0.as_str()), Some("response.completed"));
    let cancel = post(&r.url, &format!("/v1/responses/{id}/cancel"), json!({})).await;
    assert_eq!(cancel.status(), 200, "cancelling a finished background response returns it");
    // A background response that failed is read as it stands: the route's answer is the
    // provider's word, not a failed attempt to retry.
    let failing: Value =
        post(&r.url, "/v1/responses", json!({"model": "resp", "input": "FAILED later", "background": true})).await.json().await.unwrap();
    let id = failing["id"].as_str().unwrap();
    let mut polled = failing.clone();
    while matches!(polled["status"].as_str(), Some("queued" | "in_progress")) {
        let read = get(&r.url, &format!("/v1/responses/{id}")).await;
        assert_eq!(read.status(), 200);
        polled = read.json().await.unwrap();
    }
    assert_eq!((polled["status"].as_str(), polled["error"]["code"].as_str()), (Some("failed"), Some("server_error")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_structured_response_is_checked_whole_and_streamed() {
    let (r, _) = start_surface(&surface_scope("resp", "", &[("a", "a")])).await;
    let schema = json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]});
    let format = json!({"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": true}});
    let whole: Value = post(&r.url, "/v1/responses", json!({"model": "resp", "input": "json", "text": format})).await.json().await.unwrap();
    assert_eq!(output_text(&whole), "{\"answer\": \"echo\"}");
    let text = post(&r.url, "/v1/responses", json!({"model": "resp", "input": "json", "text": format, "stream": true}))
        .await
        .text()
        .await
        .unwrap();
    let events = events(&text);
    assert_eq!(events.last().map(|e| e.0.as_str()), Some("response.completed"));
    let bad =
        post(&r.url, "/v1/responses", json!({"model": "resp", "input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}}))
            .await;
    let error: Value = bad.json().await.unwrap();
    assert_eq!(error["error"]["param"], "text.format.schema");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_that_are_malformed_unknown_or_huge_get_a_clear_4xx() {
    let (r, _) = start_surface(&surface_scope("resp", "", &[("a", "a")])).await;
    let unknown = get(&r.url, "/v1/responses/resp_nobody").await;
    assert_eq!(unknown.status(), 404);
    let malformed = get(&r.url, "/v1/responses/resp%20bad%3Bid").await;
    assert_eq!(malformed.status(), 400);
    let error: Value = malformed.json().await.unwrap();
    assert_eq!(error["error"]["param"], "id");
    let huge = get(&r.url, &format!("/v1/responses/{}", "r".repeat(10_000))).await;
    assert!(huge.status().is_client_error(), "{}", huge.status());
    for (field, value) in
        [("previous_response_id", json!("x".repeat(10_000))), ("previous_response_id", json!(7)), ("conversation", json!({"id": "a/b"}))]
    {
        let refused = post(&r.url, "/v1/responses", json!({"model": "resp", "input": "x", field: value})).await;
        assert_eq!(refused.status(), 400, "{field}");
        let error: Value = refused.json().await.unwrap();
        assert_eq!(error["error"]["param"], field);
    }
    assert!(r.provider.received().is_empty(), "nothing reached the provider");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_response_is_the_providers_fault_and_is_asked_again_elsewhere() {
    let scope = surface_scope("pair", "selector = \"round_robin\"", &[("first", "a"), ("second", "b")]);
    let (r, _) = start_surface(&scope).await;
    let failed = post(&r.url, "/v1/responses", json!({"model": "pair", "input": "FAILED"})).await;
    // Every account fails this one: the call ends with the budget spent, after trying both.
    assert_eq!(failed.status(), 502);
    let sources: std::collections::BTreeSet<String> =
        r.provider.received().iter().map(|q| q.path.split('/').nth(1).unwrap().to_owned()).collect();
    assert_eq!(sources.into_iter().collect::<Vec<_>>(), ["a", "b"]);
    let gate = r.gates.snapshot(&gateway_core::ports::SourceKey::new("pair", "first")).unwrap();
    assert!(gate.f0 + gate.f1 >= 1, "a failed response counts against its source: {gate:?}");
}
