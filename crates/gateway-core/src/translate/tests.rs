//! The translation tables, both directions, whole and streamed, on real-shaped bodies (as
//! OpenAI's and Anthropic's APIs document and send them).

use super::*;
use crate::stream::{assemble, chunks_of};
use serde_json::{Value, json};

/// The body, owned (the tests' requests are temporaries).
fn request_body(request: &Request, protocol: Protocol, max_tokens: u32) -> Object {
    super::request_body(request, protocol, max_tokens).into_owned()
}

fn object(value: Value) -> Object {
    value.as_object().cloned().unwrap_or_default()
}

fn chat(body: Value) -> Request {
    Request::native(Kind::Chat, object(body))
}

fn messages(body: Value) -> Request {
    Request::native(Kind::Messages, object(body))
}

/// An OpenAI chat request using every field the table covers.
fn full_chat() -> Value {
    json!({
        "model": "chat",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in these?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}}
            ]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "user", "content": "thanks"}
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": false,
        "stop": ["END"],
        "max_completion_tokens": 300,
        "temperature": 1.4,
        "top_p": 0.9,
        "seed": 7,
        "user": "u-1"
    })
}

#[test]
fn a_chat_request_becomes_a_messages_request() {
    let body = request_body(&chat(full_chat()), Protocol::Anthropic, 4096);
    assert_eq!(
        Value::Object(body),
        json!({
            "system": "Be brief.\n\nUse tools.",
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "What is in these?"},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}}
                ]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
                    {"type": "text", "text": "thanks"}
                ]}
            ],
            "max_tokens": 300,
            "temperature": 1.0,
            "stop_sequences": ["END"],
            "metadata": {"user_id": "u-1"},
            "tools": [{"name": "get_weather", "description": "Weather.", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
            "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true}
        })
    );
}

#[test]
fn json_modes_become_a_forced_tool_or_an_instruction_and_max_tokens_a_default() {
    let schema = json!({"type": "object", "properties": {"answer": {"type": "string"}}});
    let body = request_body(
        &chat(json!({"messages": [{"role": "user", "content": "hi"}],
                     "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}})),
        Protocol::Anthropic,
        4096,
    );
    assert_eq!(body["max_tokens"], 4096);
    assert_eq!(body["tools"], json!([{"name": JSON_TOOL, "description": "Give the answer as this tool's input.", "input_schema": schema}]));
    assert_eq!(body["tool_choice"], json!({"type": "tool", "name": JSON_TOOL}));
    let body = request_body(
        &chat(json!({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"},
                                         "tool_choice": "auto"})),
        Protocol::Anthropic,
        10,
    );
    assert_eq!(body["system"], "Answer with a single JSON object and nothing else.");
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none(), "no tools, no choice");
    for (choice, mapped) in
        [(json!("auto"), json!({"type": "auto"})), (json!("required"), json!({"type": "any"})), (json!("none"), json!({"type": "none"}))]
    {
        let body =
            request_body(&chat(json!({"messages": [], "tools": full_chat()["tools"], "tool_choice": choice})), Protocol::Anthropic, 1);
        assert_eq!(body["tool_choice"], mapped);
    }
}

#[test]
fn a_messages_request_becomes_a_chat_request() {
    let request = messages(json!({
        "model": "claude",
        "system": [{"type": "text", "text": "Be brief."}],
        "max_tokens": 200,
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/b.png"}}
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]}]},
            {"role": "user", "content": "thanks"}
        ],
        "tools": [{"name": "get_weather", "description": "Weather.", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "stop_sequences": ["END"],
        "temperature": 0.3,
        "top_p": 0.8,
        "top_k": 5,
        "metadata": {"user_id": "u-2"}
    }));
    assert_eq!(
        Value::Object(request_body(&request, Protocol::OpenAi, 1)),
        json!({
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [
                    {"type": "text", "text": "Look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/b.png"}}
                ]},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
                {"role": "user", "content": "thanks"}
            ],
            "max_completion_tokens": 200,
            "temperature": 0.3,
            "top_p": 0.8,
            "stop": ["END"],
            "user": "u-2",
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": {"type": "object"}}}],
            "tool_choice": "required",
            "parallel_tool_calls": false
        })
    );
}

#[test]
fn what_the_other_side_cannot_express_makes_the_source_ineligible() {
    let refused = |request: &Request, protocol| carries(request, protocol).err().unwrap_or_default();
    assert!(refused(&chat(json!({"messages": [], "n": 2})), Protocol::Anthropic).contains("n > 1"));
    assert!(refused(&chat(json!({"messages": [], "logprobs": true})), Protocol::Anthropic).contains("logprobs"));
    assert!(
        refused(&chat(json!({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]})), Protocol::Anthropic)
            .contains("input_audio")
    );
    assert!(
        refused(&messages(json!({"messages": [{"role": "user", "content": [{"type": "document"}]}]})), Protocol::OpenAi)
            .contains("document")
    );
    assert!(
        refused(&messages(json!({"messages": [], "tools": [{"type": "web_search_20250305", "name": "web_search"}]})), Protocol::OpenAi)
            .contains("server tool")
    );
    assert!(refused(&Request::native(Kind::Embeddings, Object::new()), Protocol::Anthropic).contains("embeddings"));
    assert!(refused(&Request::native(Kind::CountTokens, Object::new()), Protocol::OpenAi).contains("count_tokens"));
    assert_eq!(carries(&chat(full_chat()), Protocol::Anthropic), Ok(()));
    assert_eq!(carries(&chat(json!({"messages": [], "n": 2})), Protocol::OpenAi), Ok(()), "its own protocol always");
}

fn claude_message(content: Value, stop: &str) -> Object {
    object(json!({"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": content,
                  "stop_reason": stop, "stop_sequence": null,
                  "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 4, "cache_creation_input_tokens": 2}}))
}

#[test]
fn messages_answers_become_chat_completions_with_finish_reasons_and_usage() {
    let cases = [
        (json!([{"type": "text", "text": "Hi"}]), "end_turn", json!({"role": "assistant", "content": "Hi", "refusal": null}), "stop"),
        (json!([{"type": "text", "text": "Hi"}]), "max_tokens", json!({"role": "assistant", "content": "Hi", "refusal": null}), "length"),
        (json!([{"type": "text", "text": "Hi"}]), "stop_sequence", json!({"role": "assistant", "content": "Hi", "refusal": null}), "stop"),
        (
            json!([{"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}]),
            "tool_use",
            json!({"role": "assistant", "content": null, "refusal": null, "reasoning_content": "hmm",
                   "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]}),
            "tool_calls",
        ),
        (
            json!([{"type": "tool_use", "id": "t", "name": JSON_TOOL, "input": {"answer": "x"}}]),
            "tool_use",
            json!({"role": "assistant", "content": "{\"answer\":\"x\"}", "refusal": null}),
            "stop",
        ),
        (json!([]), "refusal", json!({"role": "assistant", "content": null, "refusal": "The model refused to answer."}), "content_filter"),
    ];
    for (content, stop, message, finish) in cases {
        let response = answer(Kind::Chat, Protocol::Anthropic, claude_message(content, stop));
        let body = response.body();
        assert_eq!(body["choices"][0]["message"], message, "{stop}");
        assert_eq!(body["choices"][0]["finish_reason"], finish, "{stop}");
        assert_eq!(
            body["usage"],
            json!({"prompt_tokens": 16, "completion_tokens": 5, "total_tokens": 21, "prompt_tokens_details": {"cached_tokens": 4}})
        );
        assert!(response.is_usable(), "{stop}");
    }
}

fn completion(message: Value, finish: &str) -> Object {
    object(json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
                  "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                  "usage": {"prompt_tokens": 20, "completion_tokens": 6, "total_tokens": 26, "prompt_tokens_details": {"cached_tokens": 8}}}))
}

#[test]
fn chat_completions_become_messages_answers_with_stop_reasons_and_usage() {
    let call = json!({"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}});
    let cases = [
        (json!({"role": "assistant", "content": "Hi"}), "stop", json!([{"type": "text", "text": "Hi"}]), "end_turn"),
        (json!({"role": "assistant", "content": "Hi"}), "length", json!([{"type": "text", "text": "Hi"}]), "max_tokens"),
        (
            json!({"role": "assistant", "content": null, "tool_calls": [call]}),
            "tool_calls",
            json!([{"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1}}]),
            "tool_use",
        ),
        (json!({"role": "assistant", "content": null, "refusal": "No."}), "stop", json!([{"type": "text", "text": "No."}]), "refusal"),
        (json!({"role": "assistant", "content": "x"}), "content_filter", json!([{"type": "text", "text": "x"}]), "refusal"),
    ];
    for (message, finish, content, stop) in cases {
        let response = answer(Kind::Messages, Protocol::OpenAi, completion(message, finish));
        assert_eq!(response.body()["content"], content, "{finish}");
        assert_eq!(response.body()["stop_reason"], stop, "{finish}");
        assert_eq!(
            response.body()["usage"],
            json!({"input_tokens": 12, "output_tokens": 6, "cache_read_input_tokens": 8, "cache_creation_input_tokens": 0})
        );
        assert!(response.is_usable(), "{finish}");
    }
}

/// Streams the source's events of `whole` (its own dialect) through a translation.
fn translated(kind: Kind, protocol: Protocol, source: &Response) -> Vec<Chunk> {
    let mut stream = Stream::of(kind, protocol);
    let mut out: Vec<Chunk> = chunks_of(source).into_iter().flat_map(|e| stream.push(e)).collect();
    out.extend(stream.finish());
    out
}

#[test]
fn an_anthropic_stream_becomes_chat_chunks_that_assemble_into_the_translated_answer() {
    for (content, stop) in [
        (
            json!([{"type": "text", "text": "Let me check."}, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"city": "Paris"}}]),
            "tool_use",
        ),
        (json!([{"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "text", "text": "Hi"}]), "max_tokens"),
        (json!([{"type": "tool_use", "id": "t", "name": JSON_TOOL, "input": {"answer": "x"}}]), "tool_use"),
    ] {
        let source = Response::new(Kind::Messages, claude_message(content, stop));
        let chunks = translated(Kind::Chat, Protocol::Anthropic, &source);
        assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
        let whole = assemble(Kind::Chat, &chunks);
        let expected = to_anthropic::answer(source.body());
        assert_eq!(whole.body()["choices"][0]["message"]["content"], expected.body()["choices"][0]["message"]["content"], "{stop}");
        assert_eq!(whole.body()["choices"][0]["finish_reason"], expected.body()["choices"][0]["finish_reason"], "{stop}");
        assert_eq!(whole.tool_calls(), expected.tool_calls(), "{stop}");
        assert_eq!(whole.usage(), expected.usage(), "{stop}");
    }
}

#[test]
fn a_chat_stream_becomes_anthropic_events_that_assemble_into_the_translated_answer() {
    let call =
        |i: u64, name: &str| json!({"id": format!("call_{i}"), "type": "function", "function": {"name": name, "arguments": "{\"a\":1}"}});
    for (message, finish) in [
        (json!({"role": "assistant", "content": "Hello there"}), "stop"),
        (json!({"role": "assistant", "content": "Two calls", "tool_calls": [call(0, "f"), call(1, "g")]}), "tool_calls"),
        (json!({"role": "assistant", "content": "cut"}), "length"),
    ] {
        let source = Response::new(Kind::Chat, completion(message, finish));
        let events = translated(Kind::Messages, Protocol::OpenAi, &source);
        assert_eq!(crate::stream::messages::event_type(&events[0]), "message_start");
        assert_eq!(crate::stream::messages::event_type(&events[events.len() - 1]), "message_stop");
        let whole = assemble(Kind::Messages, &events);
        let expected = to_openai::answer(source.body());
        for field in ["content", "stop_reason"] {
            assert_eq!(whole.body()[field], expected.body()[field], "{finish} {field}");
        }
        assert_eq!(whole.usage(), expected.usage(), "{finish}");
    }
}

#[test]
fn tool_arguments_stream_in_pieces_both_ways() {
    // Chat's pieces of one call's arguments as input_json_delta pieces.
    let mut events = Stream::of(Kind::Messages, Protocol::OpenAi);
    let piece = |delta: Value, finish: Value| {
        object(json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
    };
    let mut out = Vec::new();
    out.extend(events.push(piece(json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_9", "type": "function", "function": {"name": "f", "arguments": ""}}]}), Value::Null)));
    out.extend(events.push(piece(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":"}}]}), Value::Null)));
    out.extend(events.push(piece(json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}), Value::Null)));
    out.extend(events.push(piece(json!({}), json!("tool_calls"))));
    out.extend(events.finish());
    let pieces: Vec<&str> = out.iter().filter_map(|e| e.get("delta")?.get("partial_json")?.as_str()).collect();
    assert_eq!(pieces, ["{\"a\":", "1}"]);
    assert!(out.iter().any(|e| crate::stream::commits(Kind::Messages, e)), "a tool's first piece commits");
    let whole = assemble(Kind::Messages, &out);
    assert_eq!(whole.body()["content"][0]["input"], json!({"a": 1}));
    assert_eq!(whole.body()["stop_reason"], "tool_use");
}

#[test]
fn what_anthropic_refuses_is_kept_from_it_or_makes_the_source_ineligible() {
    let body = request_body(
        &chat(json!({"messages": [{"role": "user", "content": [{"type": "text", "text": ""}, {"type": "text", "text": "hi"}]}],
                     "temperature": 0.5, "top_p": 0.9})),
        Protocol::Anthropic,
        1,
    );
    assert_eq!(body["messages"][0]["content"], json!([{"type": "text", "text": "hi"}]), "an empty text block is left out");
    assert_eq!((body.get("temperature"), body.get("top_p")), (Some(&json!(0.5)), None), "never both");
    let body = request_body(&chat(json!({"messages": [], "top_p": 0.9})), Protocol::Anthropic, 1);
    assert_eq!(body.get("top_p"), Some(&json!(0.9)));
    for stop in [json!("\n"), json!(["END", " "])] {
        assert!(carries(&chat(json!({"messages": [], "stop": stop})), Protocol::Anthropic).is_err_and(|why| why.contains("whitespace")));
    }
}

#[test]
fn what_openai_cannot_take_makes_the_source_ineligible_and_a_failed_tool_says_so() {
    let refused = |body: Value| carries(&messages(body), Protocol::OpenAi).err().unwrap_or_default();
    assert!(refused(json!({"messages": [], "output_format": {"type": "json_schema", "schema": {}}})).contains("structured outputs"));
    assert!(refused(json!({"messages": [], "stop_sequences": ["a", "b", "c", "d", "e"]})).contains("more than 4"));
    let file = json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]});
    assert!(refused(file).contains("file source"));
    let failed = messages(
        json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": true, "content": "boom"}]}]}),
    );
    assert_eq!(
        request_body(&failed, Protocol::OpenAi, 1)["messages"][0],
        json!({"role": "tool", "tool_call_id": "t", "content": "Error: boom"})
    );
}

#[test]
fn tool_calls_without_an_index_or_ending_with_stop_are_still_tool_uses() {
    let mut events = Stream::of(Kind::Messages, Protocol::OpenAi);
    let piece = |delta: Value, finish: Value| {
        object(json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
    };
    let call =
        |id: &str, name: &str| json!({"tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": "{}"}}]});
    let mut out = Vec::new();
    out.extend(events.push(piece(call("call_a", "f"), Value::Null)));
    out.extend(events.push(piece(call("call_b", "g"), Value::Null)));
    out.extend(events.push(piece(json!({}), json!("stop"))));
    out.extend(events.finish());
    let whole = assemble(Kind::Messages, &out);
    let names: Vec<&str> = crate::messages::content(whole.body()).iter().filter_map(|b| b["name"].as_str()).collect();
    assert_eq!(names, ["f", "g"], "a new id is a new call");
    assert_eq!(whole.body()["stop_reason"], "tool_use");
    let calls = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "x", "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
    assert_eq!(answer(Kind::Messages, Protocol::OpenAi, completion(calls, "stop")).body()["stop_reason"], "tool_use");
}

#[test]
fn a_claude_tool_without_arguments_is_called_with_an_empty_object() {
    let mut chunks = Stream::of(Kind::Chat, Protocol::Anthropic);
    let mut out = Vec::new();
    for event in [
        json!({"type": "message_start", "message": {"id": "m", "model": "claude", "usage": {"input_tokens": 1, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}}),
        json!({"type": "message_stop"}),
    ] {
        out.extend(chunks.push(object(event)));
    }
    let whole = assemble(Kind::Chat, &out);
    assert_eq!(whole.tool_calls()[0]["function"], json!({"name": "now", "arguments": "{}"}));
    assert_eq!(whole.finish_reason(), Some("tool_calls"));
}

/// An answer in the caller's own dialect keeps the text it was parsed from; a translated one is
/// written from its translation.
#[test]
fn only_an_untranslated_answer_keeps_the_text_it_came_as() {
    let text = bytes::Bytes::from_static(b"{\"choices\": []}");
    let same = answer_as_sent(Kind::Chat, Protocol::OpenAi, object(json!({"choices": []})), text.clone());
    assert_eq!(same.sent(), Some(&text));
    let message = json!({"id": "msg_1", "type": "message", "role": "assistant", "content": [], "stop_reason": "end_turn"});
    let to_chat = answer_as_sent(Kind::Chat, Protocol::Anthropic, object(message.clone()), text.clone());
    assert_eq!(to_chat.sent(), None, "a chat answer made from a Messages answer");
    let native = answer_as_sent(Kind::Messages, Protocol::Anthropic, object(message), text.clone());
    assert_eq!(native.sent(), Some(&text));
    let to_messages = answer_as_sent(Kind::Messages, Protocol::OpenAi, object(json!({"choices": []})), text);
    assert_eq!(to_messages.sent(), None, "a Messages answer made from a chat answer");
}
