//! One judgement of a choice, whole or streamed (SPEC §2, §8): a whitespace-only refusal says
//! nothing, a blank choice among `n` is no JSON answer, and a stream is judged as its whole
//! answer would be.

use super::*;
use gateway_core::stream::commits;

fn whole_body(choices: &[serde_json::Value]) -> serde_json::Value {
    let choices: Vec<_> = choices
        .iter()
        .enumerate()
        .map(|(i, message)| {
            let mut message = message.clone();
            message["role"] = json!("assistant");
            json!({"index": i, "message": message, "finish_reason": "stop"})
        })
        .collect();
    json!({"id": "c", "object": "chat.completion", "choices": choices})
}

fn stream_of(choices: &[serde_json::Value]) -> Answer {
    let mut events: Vec<(Duration, String)> = choices
        .iter()
        .enumerate()
        .map(|(i, delta)| {
            (Duration::ZERO, format!("data: {}\n\n", json!({"choices": [{"index": i, "delta": delta, "finish_reason": "stop"}]})))
        })
        .collect();
    events.push((Duration::ZERO, "data: [DONE]\n\n".into()));
    timed(events)
}

fn asking(structured: bool) -> Request {
    let mut request = chat(false);
    if structured {
        request.structured = Some(Structured::JsonSchema(json!({"type": "object", "required": ["answer"]})));
    }
    request
}

/// The class of the whole answer, and of the same answer streamed: a stream that ends cleanly
/// without a chunk that commits is what the call loop calls `Transient(empty)`.
async fn judged(choices: Vec<serde_json::Value>, structured: bool) -> (OutcomeClass, OutcomeClass) {
    let body = whole_body(&choices);
    let whole = answer(move || ok_json(body.clone()), json!({}), asking(structured)).await.outcome().class;
    let mock = MockServer::answering(move |_| stream_of(&choices)).await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({}))]).unwrap();
    let request = asking(structured);
    let Streamed::Chunks(mut chunks) = upstream.stream("s1", &request).await else { panic!("a stream") };
    let mut committed = false;
    let streamed = loop {
        match chunks.next_chunk().await {
            Some(Ok(chunk)) => committed |= commits(gateway_core::request::Kind::Chat, &chunk),
            Some(Err(outcome)) => break outcome.class,
            None if committed => break Success,
            None => break Transient,
        }
    };
    (whole, streamed)
}

#[tokio::test]
async fn a_blank_choice_among_n_fails_the_structured_check_whole_or_streamed() {
    let choices = vec![json!({"content": "{\"answer\": 1}"}), json!({"content": ""})];
    assert_eq!(judged(choices, true).await, (ResultInvalid, ResultInvalid));
    let choices = vec![json!({"content": "{\"answer\": 1}"}), json!({"content": null})];
    assert_eq!(judged(choices, true).await, (ResultInvalid, ResultInvalid), "no text is a blank answer too");
    // Without a structure a blank choice beside a usable one is still an answer.
    let choices = vec![json!({"content": "hi"}), json!({"content": ""})];
    assert_eq!(judged(choices, false).await, (Success, Success));
}

#[tokio::test]
async fn a_refusal_that_says_something_is_an_answer_and_no_text_to_check() {
    let choices = vec![json!({"content": "{\"answer\": 1}"}), json!({"content": null, "refusal": "I can't help with that."})];
    assert_eq!(judged(choices, true).await, (Success, Success));
}

#[tokio::test]
async fn a_whitespace_only_refusal_says_nothing_whole_or_streamed() {
    // Beside text: the text is the answer, and it is checked.
    let choices = vec![json!({"content": "{\"other\": 1}", "refusal": "   "})];
    assert_eq!(judged(choices, true).await, (ResultInvalid, ResultInvalid));
    // Alone: nothing usable came, with a structure or without.
    assert_eq!(judged(vec![json!({"content": null, "refusal": " \n "})], true).await, (Transient, Transient));
    assert_eq!(judged(vec![json!({"content": "  "}), json!({"refusal": " "})], false).await, (Transient, Transient));
}
