//! An attempt's JSON body: the caller's fields in the caller's order, with the source's `model`
//! and the gateway's `stream` and `stream_options` where the caller put them.

use super::*;
use gateway_core::request::Kind;

fn native(kind: Kind, body: serde_json::Value) -> Request {
    Request::native(kind, body.as_object().unwrap().clone())
}

fn keys(body: &serde_json::Value) -> Vec<&str> {
    body.as_object().unwrap().keys().map(String::as_str).collect()
}

#[tokio::test]
async fn the_attempt_body_keeps_the_callers_fields_in_the_callers_order() {
    let mock = MockServer::answering(|seen| {
        if seen.wants_stream() {
            let chunk = json!({"choices": [{"index": 0, "delta": {"content": "done"}, "finish_reason": "stop"}]});
            Answer::sse([Frame::data(format!("data: {chunk}\n\ndata: [DONE]\n\n"))])
        } else if seen.path.ends_with("/batches") {
            ok_json(json!({"id": "batch_1", "object": "batch", "status": "validating"}))
        } else {
            ok_json(completion("hi"))
        }
    })
    .await
    .unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({}))]).unwrap();

    // Whole: the caller's stream fields left out, the source's model in the caller's place.
    let whole = native(
        Kind::Chat,
        json!({"model": "x", "stream": false, "messages": [{"role": "user", "content": "hi"}],
               "stream_options": {"include_usage": true}, "max_tokens": 16, "zz": 1}),
    );
    assert_eq!(upstream.send("s1", &whole).await.outcome().class, Success);
    let sent = &mock.received()[0].body;
    assert_eq!(keys(sent), ["model", "messages", "max_tokens", "zz"]);
    assert_eq!(sent["model"], "m1");

    // Streamed: the caller's options where they were, with the usage asked for; `stream` after
    // the caller's fields.
    let streamed = native(
        Kind::Chat,
        json!({"messages": [{"role": "user", "content": "hi"}], "stream_options": {"include_obfuscation": false},
               "model": "x", "zz": 1}),
    );
    let Streamed::Chunks(mut chunks) = upstream.stream("s1", &streamed).await else { panic!("chunks") };
    while chunks.next_chunk().await.is_some() {}
    let sent = &mock.received()[1].body;
    assert_eq!(keys(sent), ["messages", "stream_options", "model", "zz", "stream"]);
    assert_eq!(sent["stream_options"], json!({"include_obfuscation": false, "include_usage": true}));
    assert_eq!((&sent["stream"], &sent["model"]), (&json!(true), &json!("m1")));

    // A kind that takes no model keeps the caller's, if it sent one.
    let batch = native(
        Kind::Batches,
        json!({"model": "callers", "input_file_id": "file-1", "endpoint": "/v1/chat/completions", "completion_window": "24h"}),
    );
    assert_eq!(upstream.send("s1", &batch).await.outcome().class, Success);
    let sent = &mock.received()[2].body;
    assert_eq!(keys(sent), ["model", "input_file_id", "endpoint", "completion_window"]);
    assert_eq!(sent["model"], "callers");
}
