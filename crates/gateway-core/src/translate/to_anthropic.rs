//! A chat completion served by an Anthropic source: the chat request as a Messages request, and
//! the Messages answer (whole, or its named events) as the chat completion (or its chunks) the
//! caller asked for.
//!
//! The request: `system` and `developer` messages become `system`; consecutive messages of one
//! role merge (Anthropic alternates); text parts stay text; an image part is an `image` block (a
//! `data:` URL as base64, any other URL as a URL); an assistant's `tool_calls` are `tool_use`
//! blocks; a `tool` message is a `tool_result` block in a user turn; `tools` are Anthropic's
//! (`input_schema` = `parameters`), `tool_choice` `auto` / `none` / `required` / a function is
//! `auto` / `none` / `any` / `tool`, `parallel_tool_calls: false` is
//! `disable_parallel_tool_use`; `stop` is `stop_sequences`; `max_completion_tokens` (or
//! `max_tokens`) is `max_tokens`, the source's default when the caller set none; `temperature`
//! (capped at Anthropic's 1) and `top_p` pass; `user` is `metadata.user_id`. JSON modes: a
//! `json_schema` format is a tool of that schema the model must call, whose input is the
//! answer's text; `json_object` is an instruction appended to `system`. Sampling hints Anthropic
//! lacks (`seed`, penalties, `logit_bias`, …) are left out. What it cannot express makes the
//! source ineligible ([`refusal`]): `n` > 1, `logprobs`, audio, a content part it does not know.
//!
//! The answer: text blocks are the message's content, `tool_use` blocks its tool calls (the
//! JSON tool's input its content), thinking `reasoning_content`; `end_turn` / `stop_sequence` /
//! `pause_turn` are `stop`, `max_tokens` is `length`, `tool_use` is `tool_calls`, `refusal` is
//! `content_filter` with the message's `refusal`; usage counts cached input in `prompt_tokens`
//! (`prompt_tokens_details.cached_tokens` the cache reads).

use super::{JSON_TOOL, stop_reason_to_finish};
use crate::request::{Kind, Object, Request, Response};
use crate::stream::Chunk;
use serde_json::{Value, json};

/// Why a chat request cannot be carried to an Anthropic source, if it cannot.
pub fn refusal(body: &Object) -> Option<String> {
    if body.get("n").and_then(Value::as_u64).is_some_and(|n| n > 1) {
        return Some("n > 1 (Anthropic answers one choice)".into());
    }
    if body.get("logprobs").and_then(Value::as_bool) == Some(true) || body.get("top_logprobs").is_some_and(|v| !v.is_null()) {
        return Some("logprobs (Anthropic has none)".into());
    }
    if body.get("audio").is_some_and(|v| !v.is_null())
        || body.get("modalities").and_then(Value::as_array).is_some_and(|m| m.iter().any(|x| x != "text"))
    {
        return Some("audio output".into());
    }
    let stops: Vec<&Value> = match body.get("stop") {
        Some(Value::Array(stops)) => stops.iter().collect(),
        Some(stop @ Value::String(_)) => vec![stop],
        _ => Vec::new(),
    };
    if stops.iter().any(|s| s.as_str().is_none_or(|s| s.trim().is_empty())) {
        return Some("a stop sequence of whitespace only (Anthropic refuses it)".into());
    }
    let messages = body.get("messages").and_then(Value::as_array)?;
    for message in messages {
        for part in message.get("content").and_then(Value::as_array).into_iter().flatten() {
            match part.get("type").and_then(Value::as_str) {
                Some("text" | "image_url") => {}
                other => return Some(format!("a content part of type {}", other.unwrap_or("(none)"))),
            }
        }
        if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
            for call in calls {
                let arguments = call.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("{}");
                if !serde_json::from_str::<Value>(if arguments.trim().is_empty() { "{}" } else { arguments }).is_ok_and(|v| v.is_object()) {
                    return Some("a tool call whose arguments are not a JSON object".into());
                }
            }
        }
    }
    for tool in body.get("tools").and_then(Value::as_array).into_iter().flatten() {
        if tool.get("type").and_then(Value::as_str).is_some_and(|t| t != "function") {
            return Some(format!("a tool of type {}", tool["type"]));
        }
    }
    None
}

/// A chat message's content as Anthropic blocks.
fn blocks(content: &Value) -> Vec<Value> {
    match content {
        Value::String(text) if text.is_empty() => Vec::new(),
        Value::String(text) => vec![json!({"type": "text", "text": text})],
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| match part.get("type").and_then(Value::as_str) {
                // Anthropic refuses an empty text block.
                Some("text") => {
                    part.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()).map(|t| json!({"type": "text", "text": t}))
                }
                Some("image_url") => {
                    let url = part.pointer("/image_url/url").and_then(Value::as_str).unwrap_or("");
                    Some(match url.strip_prefix("data:").and_then(|rest| rest.split_once(";base64,")) {
                        Some((media_type, data)) => {
                            json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
                        }
                        None => json!({"type": "image", "source": {"type": "url", "url": url}}),
                    })
                }
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A text of `content` (a string, or its text parts joined).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

/// Appends `blocks` as a turn of `role`, merged into the last turn when it has that role.
fn push_turn(turns: &mut Vec<Value>, role: &str, blocks: Vec<Value>) {
    if blocks.is_empty() {
        return;
    }
    if let Some(last) = turns.last_mut().filter(|t| t["role"] == role)
        && let Some(content) = last.get_mut("content").and_then(Value::as_array_mut)
    {
        content.extend(blocks);
        return;
    }
    turns.push(json!({"role": role, "content": blocks}));
}

/// The Messages body of a chat request (without `model`; `max_tokens` the source's default
/// when it sets none).
pub fn request_body(request: &Request, default_max_tokens: u32) -> Object {
    let body = request.body();
    let mut system = Vec::new();
    let mut turns = Vec::new();
    for message in body.get("messages").and_then(Value::as_array).into_iter().flatten() {
        let content = message.get("content").unwrap_or(&Value::Null);
        match message.get("role").and_then(Value::as_str).unwrap_or("user") {
            "system" | "developer" => system.push(text_of(content)),
            "assistant" => {
                let mut out = blocks(content);
                for call in message.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                    let arguments = call.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("");
                    let input = serde_json::from_str::<Value>(arguments).unwrap_or_else(|_| json!({}));
                    out.push(json!({"type": "tool_use", "id": call.get("id").cloned().unwrap_or(json!("")),
                                    "name": call.pointer("/function/name").cloned().unwrap_or(json!("")), "input": input}));
                }
                push_turn(&mut turns, "assistant", out);
            }
            "tool" => {
                let result = json!({"type": "tool_result", "tool_use_id": message.get("tool_call_id").cloned().unwrap_or(json!("")),
                                    "content": text_of(content)});
                push_turn(&mut turns, "user", vec![result]);
            }
            _ => push_turn(&mut turns, "user", blocks(content)),
        }
    }
    let mut out = Object::new();
    let format = body.get("response_format").and_then(|f| f.get("type")).and_then(Value::as_str);
    if format == Some("json_object") {
        system.push("Answer with a single JSON object and nothing else.".into());
    }
    if !system.is_empty() {
        out.insert("system".into(), json!(system.join("\n\n")));
    }
    out.insert("messages".into(), Value::Array(turns));
    let limit = ["max_completion_tokens", "max_tokens"].iter().find_map(|f| body.get(*f).and_then(Value::as_u64));
    out.insert("max_tokens".into(), json!(limit.unwrap_or(u64::from(default_max_tokens))));
    // Current Claude models refuse both at once: the temperature is kept.
    match (body.get("temperature").and_then(Value::as_f64), body.get("top_p").filter(|v| v.is_number())) {
        (Some(t), _) => {
            out.insert("temperature".into(), json!(t.min(1.0)));
        }
        (None, Some(p)) => {
            out.insert("top_p".into(), p.clone());
        }
        (None, None) => {}
    }
    match body.get("stop") {
        Some(Value::String(stop)) => {
            out.insert("stop_sequences".into(), json!([stop]));
        }
        Some(Value::Array(stops)) if !stops.is_empty() => {
            out.insert("stop_sequences".into(), json!(stops));
        }
        _ => {}
    }
    if let Some(user) = body.get("user").and_then(Value::as_str) {
        out.insert("metadata".into(), json!({"user_id": user}));
    }
    let mut tools: Vec<Value> = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|tool| {
            let f = tool.get("function").cloned().unwrap_or(json!({}));
            let mut t = json!({"name": f.get("name").cloned().unwrap_or(json!("")),
                               "input_schema": f.get("parameters").cloned().unwrap_or(json!({"type": "object"}))});
            if let Some(description) = f.get("description") {
                t["description"] = description.clone();
            }
            t
        })
        .collect();
    let mut choice = match body.get("tool_choice") {
        Some(Value::String(c)) if c == "none" => Some(json!({"type": "none"})),
        Some(Value::String(c)) if c == "required" => Some(json!({"type": "any"})),
        Some(Value::String(_)) => Some(json!({"type": "auto"})),
        Some(Value::Object(c)) => {
            Some(json!({"type": "tool", "name": c.get("function").and_then(|f| f.get("name")).cloned().unwrap_or(json!(""))}))
        }
        _ => None,
    };
    if format == Some("json_schema") {
        let schema =
            body.get("response_format").and_then(|f| f.pointer("/json_schema/schema")).cloned().unwrap_or(json!({"type": "object"}));
        tools.push(json!({"name": JSON_TOOL, "description": "Give the answer as this tool's input.", "input_schema": schema}));
        choice = Some(json!({"type": "tool", "name": JSON_TOOL}));
    }
    if body.get("parallel_tool_calls").and_then(Value::as_bool) == Some(false)
        && let Some(c) = choice.get_or_insert_with(|| json!({"type": "auto"})).as_object_mut()
        && c.get("type") != Some(&json!("none"))
    {
        c.insert("disable_parallel_tool_use".into(), json!(true));
    }
    if !tools.is_empty() {
        out.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = choice.filter(|_| out.contains_key("tools")) {
        out.insert("tool_choice".into(), choice);
    }
    out
}

/// Anthropic's usage as chat's.
pub(super) fn usage(usage: &Value) -> Value {
    let n = |field: &str| usage.get(field).and_then(Value::as_u64).unwrap_or(0);
    let prompt = n("input_tokens") + n("cache_read_input_tokens") + n("cache_creation_input_tokens");
    json!({"prompt_tokens": prompt, "completion_tokens": n("output_tokens"), "total_tokens": prompt + n("output_tokens"),
           "prompt_tokens_details": {"cached_tokens": n("cache_read_input_tokens")}})
}

/// A tool's input as chat's `arguments`: its JSON, or the text it was when its pieces never
/// made JSON (a cut stream's).
fn arguments(input: Option<&Value>) -> String {
    match input {
        Some(Value::String(raw)) => raw.clone(),
        Some(input) => input.to_string(),
        None => "{}".to_owned(),
    }
}

/// The chat completion of a whole Messages answer.
pub fn answer(message: &Object) -> Response {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for block in crate::messages::content(message) {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("thinking") => reasoning.push_str(block.get("thinking").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") if block.get("name").and_then(Value::as_str) == Some(JSON_TOOL) => {
                text.push_str(&arguments(block.get("input")));
            }
            Some("tool_use") => calls.push(json!({"id": block.get("id").cloned().unwrap_or(json!("")), "type": "function",
                "function": {"name": block.get("name").cloned().unwrap_or(json!("")), "arguments": arguments(block.get("input"))}})),
            _ => {}
        }
    }
    let stop = message.get("stop_reason").and_then(Value::as_str);
    let finish = if calls.is_empty() && stop == Some("tool_use") { "stop" } else { stop_reason_to_finish(stop) };
    let refused = stop == Some("refusal");
    let mut reply =
        json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }, "refusal": Value::Null});
    if refused {
        reply["refusal"] = json!(if text.is_empty() { "The model refused to answer." } else { text.as_str() });
        reply["content"] = Value::Null;
    }
    if !calls.is_empty() {
        reply["tool_calls"] = Value::Array(calls);
    }
    if !reasoning.is_empty() {
        reply["reasoning_content"] = json!(reasoning);
    }
    let mut body = json!({"id": message.get("id").cloned().unwrap_or(json!("")), "object": "chat.completion", "created": 0,
                          "model": message.get("model").cloned().unwrap_or(json!("")),
                          "choices": [{"index": 0, "message": reply, "finish_reason": finish}]});
    if let Some(u) = message.get("usage") {
        body["usage"] = usage(u);
    }
    Response::new(Kind::Chat, body.as_object().cloned().unwrap_or_default())
}

/// Messages events as chat chunks, one event at a time: a chunk per piece of text, thinking or
/// tool input, the finish with `message_stop`, then the usage.
#[derive(Clone, Debug, Default)]
pub struct ChunksOfEvents {
    id: Value,
    model: Value,
    usage: Object,
    stop: Option<String>,
    /// Per block index: the tool call index it is (`None`: the JSON tool, whose input is text),
    /// and whether a piece of its input came.
    tools: Vec<(u64, Option<u64>, bool)>,
    calls: u64,
}

impl ChunksOfEvents {
    fn chunk(&self, delta: Value, finish: Value) -> Chunk {
        let chunk = json!({"id": self.id, "object": "chat.completion.chunk", "created": 0, "model": self.model,
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        chunk.as_object().cloned().unwrap_or_default()
    }

    fn merge_usage(&mut self, usage: Option<&Value>) {
        for (field, value) in usage.and_then(Value::as_object).into_iter().flatten().filter(|(_, v)| !v.is_null()) {
            self.usage.insert(field.clone(), value.clone());
        }
    }

    /// The chunks `event` makes.
    pub fn push(&mut self, event: &Chunk) -> Vec<Chunk> {
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match crate::stream::messages::event_type(event) {
            "message_start" => {
                let message = event.get("message").cloned().unwrap_or(json!({}));
                self.id = message.get("id").cloned().unwrap_or(json!(""));
                self.model = message.get("model").cloned().unwrap_or(json!(""));
                self.merge_usage(message.get("usage"));
                vec![self.chunk(json!({"role": "assistant", "content": ""}), Value::Null)]
            }
            "content_block_start" => {
                let block = event.get("content_block").cloned().unwrap_or(json!({}));
                if block.get("type").and_then(Value::as_str) != Some("tool_use") {
                    return Vec::new();
                }
                if block.get("name").and_then(Value::as_str) == Some(JSON_TOOL) {
                    self.tools.push((index, None, false));
                    return Vec::new();
                }
                let call = self.calls;
                self.calls += 1;
                self.tools.push((index, Some(call), false));
                let start = json!({"index": call, "id": block.get("id").cloned().unwrap_or(json!("")), "type": "function",
                                   "function": {"name": block.get("name").cloned().unwrap_or(json!("")), "arguments": ""}});
                vec![self.chunk(json!({"tool_calls": [start]}), Value::Null)]
            }
            "content_block_delta" => {
                let delta = event.get("delta").cloned().unwrap_or(json!({}));
                let piece = |field: &str| delta.get(field).and_then(Value::as_str).unwrap_or("").to_owned();
                let out = match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => json!({"content": piece("text")}),
                    Some("thinking_delta") => json!({"reasoning_content": piece("thinking")}),
                    Some("input_json_delta") => {
                        let Some((_, call, came)) = self.tools.iter_mut().find(|(i, ..)| *i == index) else { return Vec::new() };
                        let piece = piece("partial_json");
                        *came |= !piece.is_empty();
                        match call {
                            None => json!({"content": piece}),
                            Some(call) => json!({"tool_calls": [{"index": *call, "function": {"arguments": piece}}]}),
                        }
                    }
                    _ => return Vec::new(),
                };
                vec![self.chunk(out, Value::Null)]
            }
            // A tool's use without a piece of input is a call without arguments: `{}`, as
            // OpenAI sends it (and as its whole answer has it).
            "content_block_stop" => match self.tools.iter().find(|(i, ..)| *i == index) {
                Some((_, Some(call), false)) => {
                    vec![self.chunk(json!({"tool_calls": [{"index": call, "function": {"arguments": "{}"}}]}), Value::Null)]
                }
                _ => Vec::new(),
            },
            "message_delta" => {
                if let Some(stop) = event.get("delta").and_then(|d| d.get("stop_reason")).and_then(Value::as_str) {
                    self.stop = Some(stop.to_owned());
                }
                self.merge_usage(event.get("usage"));
                Vec::new()
            }
            "message_stop" => {
                let stop = self.stop.as_deref();
                let only_json = self.calls == 0 && stop == Some("tool_use");
                let finish = if only_json { "stop" } else { stop_reason_to_finish(stop) };
                let delta = if stop == Some("refusal") { json!({"refusal": "The model refused to answer."}) } else { json!({}) };
                let mut last = self.chunk(json!({}), json!(finish));
                if let Some(choice) = last.get_mut("choices").and_then(|c| c.get_mut(0)) {
                    choice["delta"] = delta;
                }
                let mut usage = self.chunk(json!({}), Value::Null);
                usage.insert("choices".into(), json!([]));
                usage.insert("usage".into(), self::usage(&Value::Object(self.usage.clone())));
                vec![last, usage]
            }
            _ => Vec::new(),
        }
    }
}
