//! Structured output and embeddings, the request the provider receives, the key kept out of
//! every debug and detail, and the sources the adapter refuses.

use super::*;

#[tokio::test]
async fn row_structured_output_that_fails_its_schema_is_result_invalid() {
    let mut request = chat(false);
    request.structured = Some(Structured::JsonSchema(json!({"type": "object", "required": ["answer"]})));
    let attempt = answer(|| ok_json(completion("{\"other\": 1}")), json!({}), request.clone()).await;
    assert_eq!(attempt.outcome().class, ResultInvalid);
    assert!(attempt.outcome().detail.starts_with("schema:"), "{attempt:?}");
    let attempt = answer(|| ok_json(completion("```json\n{\"answer\": 42}\n```")), json!({}), request).await;
    assert_eq!(attempt.outcome().class, Success);
    let mut parsed = chat(false);
    parsed.structured = Some(Structured::Parse(Arc::new(|c: &str| c.parse::<i64>().map(drop).map_err(|e| e.to_string()))));
    assert_eq!(answer(|| ok_json(completion("forty-two")), json!({}), parsed).await.outcome().class, ResultInvalid);
}

#[tokio::test]
async fn embeddings_return_one_vector_per_input_and_empty_data_is_transient() {
    let request = Request::embeddings(vec!["a".into(), "b".into()]);
    let body = json!({"data": [{"embedding": [0.1, 0.2]}, {"embedding": [0.3, 0.4]}], "usage": {"prompt_tokens": 2}});
    let attempt = answer(move || ok_json(body.clone()), json!({}), request.clone()).await;
    let response = attempt.response().unwrap_or_else(|| panic!("{attempt:?}"));
    assert_eq!((response.embeddings().len(), response.vector(1)), (2, Some(vec![0.3, 0.4])));
    let attempt = answer(|| ok_json(json!({"data": []})), json!({}), request).await;
    assert_eq!((attempt.outcome().class, attempt.outcome().detail.as_str()), (Transient, "empty"));
}

#[tokio::test]
async fn the_provider_gets_the_model_the_key_and_the_extra_headers() {
    let mock = Mock::start(|_| ok_json(completion("ok"))).await;
    let upstream = HttpUpstream::new(&[scope(&mock.url, json!({"headers": {"x-tenant": "t1"}}))]).unwrap();
    upstream.send("s1", &chat(false)).await;
    let seen = &mock.seen()[0];
    assert_eq!(seen.path, "/v1/chat/completions");
    assert_eq!(seen.headers["authorization"], "Bearer sk-test-secret");
    assert_eq!(seen.headers["x-tenant"], "t1");
    assert_eq!((seen.body["model"].as_str(), seen.body["max_tokens"].as_u64()), (Some("m1"), Some(16)));
    assert_eq!(seen.body["messages"][0]["role"], "user");
}

#[tokio::test]
async fn the_api_key_never_reaches_debug_or_telemetry_details() {
    let mock = Mock::start(|_| status(401, error_body("invalid_api_key"))).await;
    let upstream = HttpUpstream::new(&[scope(&mock.url, json!({}))]).unwrap();
    let shown = format!("{upstream:?}");
    assert!(!shown.contains("sk-test-secret") && shown.contains("redacted"), "{shown}");
    let attempt = upstream.send("s1", &chat(false)).await;
    assert!(!format!("{attempt:?}").contains("sk-test-secret"));
}

#[tokio::test]
async fn an_unknown_source_is_dead() {
    let upstream = HttpUpstream::new(&[scope("http://127.0.0.1:9/v1", json!({}))]).unwrap();
    assert_eq!(upstream.send("nope", &chat(false)).await.outcome().class, SourceDead);
}

#[test]
fn sources_the_adapter_cannot_use_are_named() {
    let mut no_url = scope("http://x/v1", json!({}));
    no_url.sources[0].base_url = None;
    assert_eq!(HttpUpstream::new(&[no_url]).unwrap_err().to_string(), "chat.sources.s1.base_url: required key is missing");
    let bad = scope("ftp://x/v1", json!({}));
    assert!(HttpUpstream::new(&[bad]).unwrap_err().to_string().starts_with("chat.sources.s1.base_url: value \"ftp://x/v1\""));
    let mut no_model = scope("http://x/v1", json!({}));
    no_model.sources[0].model = None;
    assert_eq!(HttpUpstream::new(&[no_model]).unwrap_err().key, "chat.sources.s1.model");
    let bad_header = scope("http://x/v1", json!({"headers": {"bad header": "v"}}));
    assert_eq!(HttpUpstream::new(&[bad_header]).unwrap_err().to_string(), "chat.sources.s1.headers.bad header: not a valid header name");
    let mut other = scope("http://y/v1", json!({}));
    other.name = "embedding".into();
    assert!(HttpUpstream::new(&[scope("http://x/v1", json!({})), other]).unwrap_err().problem.contains("configured differently"));
}
