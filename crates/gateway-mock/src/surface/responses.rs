//! The Responses API of a [`Surface`](super::Surface) account: responses made, stored (unless
//! `store: false`), chained by `previous_response_id` (each answer says its turn), streamed as
//! the provider's named events, and a stored response's routes. A background response is
//! `queued` when made, `in_progress` at the first poll and `completed` at the second. The
//! `prefail` account's streams end before their first delta; `CUT` in the input ends one just
//! after it (both cleanly, with everything sent flushed, but without their terminal event: a
//! relay that dropped the rest).

use super::{Account, error, not_found, said};
use crate::answer::{Answer, Frame};
use crate::recording::Received;
use gateway_core::request::{Kind, Response};
use serde_json::{Value, json};

/// A stored response: as it ends, its input items, its turn in its chain, and the polls a
/// background one still takes to finish.
pub(super) struct Stored {
    response: Value,
    input: Vec<Value>,
    turn: u64,
    polls_left: u32,
    cancelled: bool,
}

fn usage() -> Value {
    json!({"input_tokens": 5, "input_tokens_details": {"cached_tokens": 1, "cache_write_tokens": 0},
           "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 7})
}

fn message(id: &str, part: Value) -> Value {
    json!({"type": "message", "id": format!("msg_{id}"), "role": "assistant", "status": "completed", "content": [part]})
}

/// The whole response `id` to `body`, turn `turn` of its chain.
fn answer(id: &str, body: &Value, said: &str, turn: u64) -> Value {
    let json_format = matches!(body["text"]["format"]["type"].as_str(), Some("json_schema" | "json_object"));
    let text = |text: String| message(id, json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []}));
    let output = if said.contains("TOOLS") {
        json!([{"type": "function_call", "id": format!("fc_{id}"), "call_id": "call_1", "name": "get_weather",
                "arguments": "{\"city\":\"Paris\"}", "status": "completed"}])
    } else if said.contains("REFUSE") {
        json!([message(id, json!({"type": "refusal", "refusal": "I can't help with that."}))])
    } else if json_format {
        json!([text("{\"answer\": \"echo\"}".to_owned())])
    } else {
        json!([text(format!("echo: {said} (turn {turn})"))])
    };
    let (status, error, incomplete) = if said.contains("FAILED") {
        ("failed", json!({"code": "server_error", "message": "The model failed to answer."}), Value::Null)
    } else if said.contains("INCOMPLETE") {
        ("incomplete", Value::Null, json!({"reason": "max_output_tokens"}))
    } else {
        ("completed", Value::Null, Value::Null)
    };
    json!({
        "id": id, "object": "response", "created_at": 1_700_000_000, "status": status,
        "background": body["background"].as_bool().unwrap_or(false), "error": error, "incomplete_details": incomplete,
        "instructions": body["instructions"], "model": body["model"],
        "output": if status == "failed" { json!([]) } else { output },
        "parallel_tool_calls": true, "previous_response_id": body["previous_response_id"],
        "store": body["store"].as_bool().unwrap_or(true),
        "text": if body["text"].is_object() { body["text"].clone() } else { json!({"format": {"type": "text"}}) },
        "tool_choice": body.get("tool_choice").cloned().unwrap_or(json!("auto")),
        "tools": body.get("tools").cloned().unwrap_or(json!([])),
        "temperature": 1.0, "top_p": 1.0, "metadata": {}, "usage": usage(),
    })
}

/// The input of `body` as stored items, each with an id.
fn stored_input(id: &str, body: &Value) -> Vec<Value> {
    let items = match &body["input"] {
        Value::String(text) => vec![json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})],
        Value::Array(items) => items.clone(),
        _ => Vec::new(),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, mut item)| {
            if item.get("id").is_none() {
                item["id"] = json!(format!("in_{id}_{i}"));
            }
            item
        })
        .collect()
}

/// `response` as SSE frames of named events, from `starting_after` on; cut short as `cut`
/// says (after the events before the first delta, or after the first delta).
fn stream(response: &Value, starting_after: Option<u64>, cut: Option<Cut>) -> Answer {
    let whole = Response::new(Kind::Responses, response.as_object().cloned().unwrap_or_default());
    let events = gateway_core::stream::responses::events_of(&whole);
    let mut frames = Vec::new();
    for event in events {
        let seq = event.get("sequence_number").and_then(Value::as_u64).unwrap_or(0);
        let kind = event.get("type").and_then(Value::as_str).unwrap_or("").to_owned();
        let delta = kind == "response.output_text.delta";
        if cut == Some(Cut::BeforeDelta) && delta {
            break;
        }
        if starting_after.is_none_or(|after| seq > after) {
            frames.push(Frame::Data(format!("event: {kind}\ndata: {}\n\n", Value::Object(event))));
        }
        if cut == Some(Cut::AfterDelta) && delta {
            break;
        }
    }
    Answer::sse(frames)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    BeforeDelta,
    AfterDelta,
}

/// `POST /responses`.
pub(super) fn create(state: &mut Account, account: &str, request: &Received) -> Answer {
    let body = &request.body;
    let turn = match body["previous_response_id"].as_str() {
        None => 1,
        Some(previous) => match state.responses.get(previous) {
            Some(stored) => stored.turn + 1,
            None => {
                let message = format!("Previous response with id '{previous}' not found.");
                return error(400, &message, Some("previous_response_id"), Some("previous_response_not_found"));
            }
        },
    };
    let id = state.next_id("resp_", account);
    let said = said(request);
    let response = answer(&id, body, &said, turn);
    let background = body["background"] == json!(true);
    if body["store"] != json!(false) || background {
        let stored = Stored {
            response: response.clone(),
            input: stored_input(&id, body),
            turn,
            polls_left: if background { 2 } else { 0 },
            cancelled: false,
        };
        state.responses.insert(id, stored);
    }
    if request.wants_stream() {
        let cut = if account == "prefail" { Some(Cut::BeforeDelta) } else { said.contains("CUT").then_some(Cut::AfterDelta) };
        return stream(&response, None, cut);
    }
    if background {
        return Answer::json(200, &acknowledgement(&response, "queued"));
    }
    Answer::json(200, &response)
}

/// A background response as it stands at `status`: no output, no usage yet.
fn acknowledgement(response: &Value, status: &str) -> Value {
    let mut shell = response.clone();
    shell["status"] = json!(status);
    shell["output"] = json!([]);
    shell["usage"] = Value::Null;
    shell
}

/// `GET /responses/{id}` (`stream=true` replays its events after `starting_after`).
pub(super) fn retrieve(state: &mut Account, id: &str, query: &str) -> Answer {
    let Some(stored) = state.responses.get_mut(id) else { return not_found("Response", id) };
    let pairs: Vec<(&str, &str)> = query.split('&').filter_map(|p| p.split_once('=')).collect();
    if pairs.contains(&("stream", "true")) {
        let after = pairs.iter().find(|(k, _)| *k == "starting_after").and_then(|(_, v)| v.parse().ok());
        return stream(&stored.response, after, None);
    }
    if stored.cancelled {
        return Answer::json(200, &acknowledgement(&stored.response, "cancelled"));
    }
    if stored.polls_left > 0 {
        stored.polls_left -= 1;
        if stored.polls_left > 0 {
            return Answer::json(200, &acknowledgement(&stored.response, "in_progress"));
        }
    }
    Answer::json(200, &stored.response)
}

/// `DELETE /responses/{id}`.
pub(super) fn delete(state: &mut Account, id: &str) -> Answer {
    match state.responses.remove(id) {
        Some(_) => Answer::json(200, &json!({"id": id, "object": "response", "deleted": true})),
        None => not_found("Response", id),
    }
}

/// `GET /responses/{id}/input_items` (newest first, as OpenAI's default order is).
pub(super) fn input_items(state: &mut Account, id: &str) -> Answer {
    let Some(stored) = state.responses.get(id) else { return not_found("Response", id) };
    let data: Vec<Value> = stored.input.iter().rev().cloned().collect();
    let (first, last) = (data.first().map(|i| i["id"].clone()), data.last().map(|i| i["id"].clone()));
    Answer::json(200, &json!({"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": false}))
}

/// `POST /responses/{id}/cancel` (a background response; again, the same answer).
pub(super) fn cancel(state: &mut Account, id: &str) -> Answer {
    let Some(stored) = state.responses.get_mut(id) else { return not_found("Response", id) };
    if stored.response["background"] != json!(true) {
        return error(400, "Cannot cancel a synchronous response.", None, None);
    }
    if stored.polls_left > 0 || stored.cancelled {
        stored.cancelled = true;
        stored.polls_left = 0;
        return Answer::json(200, &acknowledgement(&stored.response, "cancelled"));
    }
    Answer::json(200, &stored.response)
}
