//! A Messages call served by an OpenAI source: the Messages request as a chat request, and the
//! chat completion (whole, or its chunks) as the Messages answer (or its named events) the
//! caller asked for.
//!
//! The request: `system` is the first message; a text block is a text part, an `image` block an
//! `image_url` part (base64 as a `data:` URL); an assistant's `tool_use` blocks are its
//! `tool_calls`; a `tool_result` block is a `tool` message (its text); its thinking in earlier
//! turns is left out (OpenAI has no place for it); `tools` are function tools (`parameters` =
//! `input_schema`), `tool_choice` `auto` / `any` / `tool` / `none` is `auto` / `required` / a
//! function / `none`, `disable_parallel_tool_use` is `parallel_tool_calls: false`;
//! `stop_sequences` is `stop`; `max_tokens` is `max_completion_tokens`; `temperature` and `top_p`
//! pass; `metadata.user_id` is `user`. `top_k` and `thinking` are left out. What it cannot express
//! makes the source ineligible ([`refusal`]): a content block it does not know (documents,
//! search results, a tool result holding an image), a server tool.
//!
//! The answer: the content is a text block, tool calls `tool_use` blocks (their arguments
//! parsed), a refusal a text block with `stop_reason: refusal`; `stop` is `end_turn`, `length`
//! `max_tokens`, `tool_calls` `tool_use`, `content_filter` `refusal`; usage counts
//! `cached_tokens` as `cache_read_input_tokens`, the rest as `input_tokens`.

use super::finish_to_stop_reason;
use crate::request::{Kind, Object, Request, Response};
use crate::stream::Chunk;
use serde_json::{Value, json};

/// Why a Messages request cannot be carried to an OpenAI source, if it cannot.
pub fn refusal(body: &Object) -> Option<String> {
    if ["output_format", "output_config"].iter().any(|f| body.get(*f).is_some_and(|v| !v.is_null())) {
        return Some("structured outputs (output_format)".into());
    }
    if body.get("stop_sequences").and_then(Value::as_array).is_some_and(|s| s.len() > 4) {
        return Some("more than 4 stop sequences (OpenAI takes 4)".into());
    }
    for message in body.get("messages").and_then(Value::as_array).into_iter().flatten() {
        for block in message.get("content").and_then(Value::as_array).into_iter().flatten() {
            match block.get("type").and_then(Value::as_str) {
                Some("image") => {
                    let source = block.pointer("/source/type").and_then(Value::as_str);
                    if !matches!(source, Some("base64" | "url")) {
                        return Some(format!("an image from a {} source", source.unwrap_or("(none)")));
                    }
                }
                Some("text" | "tool_use" | "thinking" | "redacted_thinking") => {}
                Some("tool_result") => {
                    let images = block.get("content").and_then(Value::as_array).into_iter().flatten().any(|b| b["type"] != "text");
                    if images {
                        return Some("a tool result that is not text".into());
                    }
                }
                other => return Some(format!("a content block of type {}", other.unwrap_or("(none)"))),
            }
        }
    }
    for tool in body.get("tools").and_then(Value::as_array).into_iter().flatten() {
        if tool.get("type").and_then(Value::as_str).is_some_and(|t| t != "custom") {
            return Some(format!("a server tool ({})", tool["type"]));
        }
    }
    None
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

/// The chat body of a Messages request (without `model` and `stream`).
pub fn request_body(request: &Request) -> Object {
    let body = request.body();
    let mut messages = Vec::new();
    if let Some(system) = body.get("system").map(text_of).filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in body.get("messages").and_then(Value::as_array).into_iter().flatten() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("user");
        let content = message.get("content").unwrap_or(&Value::Null);
        let Value::Array(blocks) = content else {
            messages.push(json!({"role": role, "content": content.clone()}));
            continue;
        };
        let mut parts = Vec::new();
        let mut calls = Vec::new();
        for block in blocks {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => parts.push(json!({"type": "text", "text": block.get("text").cloned().unwrap_or(json!(""))})),
                Some("image") => {
                    let source = block.get("source").cloned().unwrap_or(json!({}));
                    let url = match source.get("type").and_then(Value::as_str) {
                        Some("base64") => format!(
                            "data:{};base64,{}",
                            source.get("media_type").and_then(Value::as_str).unwrap_or("image/png"),
                            source.get("data").and_then(Value::as_str).unwrap_or("")
                        ),
                        _ => source.get("url").and_then(Value::as_str).unwrap_or("").to_owned(),
                    };
                    parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
                }
                Some("tool_use") => calls.push(json!({"id": block.get("id").cloned().unwrap_or(json!("")), "type": "function",
                    "function": {"name": block.get("name").cloned().unwrap_or(json!("")),
                                 "arguments": block.get("input").map_or_else(|| "{}".to_owned(), Value::to_string)}})),
                Some("tool_result") => {
                    let text = text_of(block.get("content").unwrap_or(&Value::Null));
                    // OpenAI's tool message has no error flag: the text says so.
                    let text = if block.get("is_error").and_then(Value::as_bool) == Some(true) { format!("Error: {text}") } else { text };
                    messages.push(
                        json!({"role": "tool", "tool_call_id": block.get("tool_use_id").cloned().unwrap_or(json!("")), "content": text}),
                    );
                }
                _ => {}
            }
        }
        if role == "assistant" {
            let text: String = parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect();
            let mut reply = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
            if !calls.is_empty() {
                reply["tool_calls"] = Value::Array(calls);
            }
            if !text.is_empty() || reply.get("tool_calls").is_some() {
                messages.push(reply);
            }
        } else if !parts.is_empty() {
            messages.push(json!({"role": role, "content": parts}));
        }
    }
    let mut out = Object::new();
    out.insert("messages".into(), Value::Array(messages));
    if let Some(limit) = body.get("max_tokens").filter(|v| v.is_u64()) {
        out.insert("max_completion_tokens".into(), limit.clone());
    }
    for field in ["temperature", "top_p"] {
        if let Some(value) = body.get(field).filter(|v| v.is_number()) {
            out.insert(field.into(), value.clone());
        }
    }
    if let Some(stops) = body.get("stop_sequences").and_then(Value::as_array).filter(|s| !s.is_empty()) {
        out.insert("stop".into(), json!(stops));
    }
    if let Some(user) = body.get("metadata").and_then(|m| m.get("user_id")).and_then(Value::as_str) {
        out.insert("user".into(), json!(user));
    }
    let tools: Vec<Value> = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|tool| {
            let mut function = json!({"name": tool.get("name").cloned().unwrap_or(json!("")),
                                      "parameters": tool.get("input_schema").cloned().unwrap_or(json!({"type": "object"}))});
            if let Some(description) = tool.get("description") {
                function["description"] = description.clone();
            }
            json!({"type": "function", "function": function})
        })
        .collect();
    if !tools.is_empty() {
        out.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = body.get("tool_choice") {
            let mapped = match choice.get("type").and_then(Value::as_str) {
                Some("any") => json!("required"),
                Some("none") => json!("none"),
                Some("tool") => json!({"type": "function", "function": {"name": choice.get("name").cloned().unwrap_or(json!(""))}}),
                _ => json!("auto"),
            };
            out.insert("tool_choice".into(), mapped);
            if choice.get("disable_parallel_tool_use").and_then(Value::as_bool) == Some(true) {
                out.insert("parallel_tool_calls".into(), json!(false));
            }
        }
    }
    out
}

/// Chat's usage as Anthropic's.
fn usage(usage: &Value) -> Value {
    let n = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
    let cached = n("/prompt_tokens_details/cached_tokens");
    json!({"input_tokens": n("/prompt_tokens").saturating_sub(cached), "output_tokens": n("/completion_tokens"),
           "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0})
}

/// The Messages answer of a whole chat completion (its first choice).
pub fn answer(completion: &Object) -> Response {
    let choice = completion.get("choices").and_then(|c| c.get(0)).cloned().unwrap_or(json!({}));
    let message = choice.get("message").cloned().unwrap_or(json!({}));
    let mut content = Vec::new();
    let refusal = message.get("refusal").and_then(Value::as_str).filter(|r| !r.trim().is_empty());
    if let Some(text) = message.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()).or(refusal) {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in message.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
        let arguments = call.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("{}");
        content.push(json!({"type": "tool_use", "id": call.get("id").cloned().unwrap_or(json!("")),
                            "name": call.pointer("/function/name").cloned().unwrap_or(json!("")),
                            "input": serde_json::from_str::<Value>(arguments).unwrap_or_else(|_| json!({}))}));
    }
    let stop = match choice.get("finish_reason").and_then(Value::as_str) {
        _ if refusal.is_some() => "refusal",
        // Some OpenAI-compatible providers end a turn of tool calls with `stop`.
        Some("stop") | None if content.iter().any(|b| b["type"] == "tool_use") => "tool_use",
        finish => finish_to_stop_reason(finish),
    };
    let mut body = json!({"id": completion.get("id").cloned().unwrap_or(json!("")), "type": "message", "role": "assistant",
                          "model": completion.get("model").cloned().unwrap_or(json!("")), "content": content,
                          "stop_reason": stop, "stop_sequence": null});
    if let Some(u) = completion.get("usage") {
        body["usage"] = usage(u);
    }
    Response::new(Kind::Messages, body.as_object().cloned().unwrap_or_default())
}

/// Which block the stream is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Open {
    Text(u64),
    /// A tool call's block, and the call's stream `index` (some providers send none).
    Tool {
        call: Option<u64>,
        block: u64,
    },
}

/// Chat chunks as Messages events, one chunk at a time: `message_start` at the first, a text
/// block and a `tool_use` block per tool call opened as their pieces come (each stopped when the
/// next opens), and at the stream's end ([`EventsOfChunks::finish`]) the stop reason, the usage
/// and `message_stop`.
#[derive(Clone, Debug, Default)]
pub struct EventsOfChunks {
    started: bool,
    open: Option<Open>,
    blocks: u64,
    stop: Option<&'static str>,
    usage: Option<Value>,
    /// Tool calls opened.
    calls: u64,
}

fn event(value: Value) -> Chunk {
    value.as_object().cloned().unwrap_or_default()
}

impl EventsOfChunks {
    fn close(&mut self, out: &mut Vec<Chunk>) {
        if let Some(Open::Text(index) | Open::Tool { block: index, .. }) = self.open.take() {
            out.push(event(json!({"type": "content_block_stop", "index": index})));
        }
    }

    /// The events `chunk` makes.
    pub fn push(&mut self, chunk: &Chunk) -> Vec<Chunk> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            let message = json!({"id": chunk.get("id").cloned().unwrap_or(json!("")), "type": "message", "role": "assistant",
                                 "model": chunk.get("model").cloned().unwrap_or(json!("")), "content": [], "stop_reason": null,
                                 "stop_sequence": null, "usage": {"input_tokens": 0, "output_tokens": 0}});
            out.push(event(json!({"type": "message_start", "message": message})));
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage(u));
        }
        let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else { return out };
        let delta = choice.get("delta").cloned().unwrap_or(json!({}));
        let text = delta.get("content").and_then(Value::as_str).or_else(|| delta.get("refusal").and_then(Value::as_str)).unwrap_or("");
        if delta.get("refusal").and_then(Value::as_str).is_some_and(|r| !r.is_empty()) {
            self.stop = Some("refusal");
        }
        if !text.is_empty() {
            if !matches!(self.open, Some(Open::Text(_))) {
                self.close(&mut out);
                let index = self.blocks;
                self.blocks += 1;
                self.open = Some(Open::Text(index));
                out.push(event(json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
            }
            let index = self.blocks - 1;
            out.push(event(json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}})));
        }
        for call in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            // A piece continues the open call when it has its index, or, from a provider that
            // sends none, when it brings no new id.
            let index = call.get("index").and_then(Value::as_u64);
            let fresh = call.get("id").and_then(Value::as_str).is_some_and(|id| !id.is_empty());
            let continues = match (self.open, index) {
                (Some(Open::Tool { call: open, .. }), Some(_)) => open == index,
                (Some(Open::Tool { .. }), None) => !fresh,
                _ => false,
            };
            if !continues {
                self.close(&mut out);
                self.calls += 1;
                let block = self.blocks;
                self.blocks += 1;
                self.open = Some(Open::Tool { call: index, block });
                let start = json!({"type": "tool_use", "id": call.get("id").cloned().unwrap_or(json!("")),
                                   "name": call.pointer("/function/name").cloned().unwrap_or(json!("")), "input": {}});
                out.push(event(json!({"type": "content_block_start", "index": block, "content_block": start})));
            }
            if let (Some(Open::Tool { block, .. }), Some(piece)) =
                (self.open, call.pointer("/function/arguments").and_then(Value::as_str).filter(|p| !p.is_empty()))
            {
                out.push(event(
                    json!({"type": "content_block_delta", "index": block, "delta": {"type": "input_json_delta", "partial_json": piece}}),
                ));
            }
        }
        if let Some(finish) = choice.get("finish_reason").and_then(Value::as_str) {
            let tools = self.calls > 0 && finish == "stop";
            self.stop = Some(self.stop.unwrap_or(if tools { "tool_use" } else { finish_to_stop_reason(Some(finish)) }));
        }
        out
    }

    /// The events that end the message, once the chunks have ended.
    pub fn finish(&mut self) -> Vec<Chunk> {
        let mut out = Vec::new();
        self.close(&mut out);
        let usage = self.usage.clone().unwrap_or(json!({"output_tokens": 0}));
        out.push(event(json!({"type": "message_delta", "delta": {"stop_reason": self.stop.unwrap_or("end_turn"), "stop_sequence": null}, "usage": usage})));
        out.push(event(json!({"type": "message_stop"})));
        out
    }
}
