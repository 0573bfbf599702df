//! The simulated providers over loopback HTTP, speaking the OpenAI dialect (chat completions, and
//! the Responses API with its named stream events) and Anthropic's (`/v1/messages`, its named
//! events, errors in its shape), whichever the gateway's source asks for:
//! [`Providers`] is a gateway-mock `Responder`, so that a soak can run through the real HTTP
//! adapter (`--transport http`) and several processes can share one set of providers and
//! accounts (`--workers N`). Source `s` is served under `http://<addr>/s/v1`
//! (`gateway_mock::source_url`). A refused connection is answered the way a relay's front proxy
//! answers when its backend refuses: 502 at once. A streamed request gets its headers at once
//! and its content after the provider's latency, so the adapter's watchdog sees the time to
//! first token. Every answer holds the reply (and the account slot it holds) until it is sent.

use crate::upstream::{Answer, Prompt, Providers};
use gateway_core::request::Kind;
use gateway_mock::{Frame, MockServer, Received, Responder, Timer, openai};
use serde_json::{Value, json};
use std::sync::Arc;

impl Providers {
    /// Serves the providers on a free port of 127.0.0.1 (keeping no record of the requests),
    /// waiting out their latencies to a tenth of a millisecond: HTTP runs in real time, where
    /// tokio's late tick, scaled up, would be latency the scenario does not have.
    pub async fn serve(self: Arc<Self>) -> std::io::Result<MockServer> {
        MockServer::builder().unrecorded().timer(Timer::Precise).start(self).await
    }
}

fn error(status: u16, code: &str, message: &str) -> gateway_mock::Answer {
    gateway_mock::Answer::json(status, &openai::error(code, message, code))
}

fn usage() -> Value {
    json!({"prompt_tokens": 200, "completion_tokens": 250, "total_tokens": 450})
}

/// An error in the dialect of `kind`'s API: Anthropic's for Messages (its type by status).
fn error_of(kind: Kind, status: u16, code: &str, message: &str) -> gateway_mock::Answer {
    if kind != Kind::Messages {
        return error(status, code, message);
    }
    let body = json!({"type": "error", "error": {"type": gateway_core::messages::error_type_of(status), "message": message}});
    gateway_mock::Answer::json(status, &body)
}

/// The source and kind of a path: `/{source}/v1/chat/completions`, `/{source}/v1/responses` or
/// `/{source}/v1/messages`.
fn route(path: &str) -> Option<(&str, Kind)> {
    let path = path.strip_prefix('/')?;
    let (source, kind) = [("/v1/chat/completions", Kind::Chat), ("/v1/responses", Kind::Responses), ("/v1/messages", Kind::Messages)]
        .into_iter()
        .find_map(|(suffix, kind)| Some((path.strip_suffix(suffix)?, kind)))?;
    (!source.is_empty() && !source.contains('/')).then_some((source, kind))
}

/// The texts of a message's content: a string, or its text blocks.
fn texts(content: &Value) -> Vec<&str> {
    match content {
        Value::String(text) => vec![text.as_str()],
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
        _ => Vec::new(),
    }
}

impl Responder for Providers {
    fn answer(&self, request: &Received) -> gateway_mock::Answer {
        let Some((source, kind)) = route(&request.path) else { return gateway_mock::Answer::new(404) };
        if request.method != "POST" {
            return gateway_mock::Answer::new(405);
        }
        if request.body.is_null() {
            return error(400, "invalid_request_error", "the body is not JSON");
        }
        let prompt = match kind {
            Kind::Responses => Prompt::of(request.body["input"].as_str().into_iter()),
            _ => {
                let messages = request.body["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
                Prompt::of(messages.iter().flat_map(|m| texts(&m["content"])))
            }
        };
        let Some(reply) = self.reply(source, prompt) else {
            return error_of(kind, 404, "model_not_found", &format!("no provider {source:?}"));
        };
        let after = reply.after;
        let mut answer = match reply.answer {
            Answer::Refused => {
                error_of(kind, 502, "bad_gateway", "connect() failed (111: Connection refused) while connecting to upstream").after(after)
            }
            Answer::Hang => gateway_mock::Answer::hang(),
            Answer::Status(status, code) => error_of(kind, status, code, "simulated provider error").after(after),
            Answer::Content(content) if kind != Kind::Chat && request.wants_stream() => events(&self.answer(kind, content), after),
            Answer::Content(content) if kind != Kind::Chat => {
                gateway_mock::Answer::json(200, &Value::Object(self.answer(kind, content).into_body())).after(after)
            }
            Answer::Content(content) if request.wants_stream() => sse(content, after),
            Answer::Content(content) => {
                let message = json!({"role": "assistant", "content": content});
                let completion = json!({"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage()});
                gateway_mock::Answer::json(200, &completion).after(after)
            }
        };
        for (name, value) in &reply.headers {
            answer = answer.header(name, value.clone());
        }
        answer.holding(reply)
    }
}

/// A `response`'s or a `message`'s named events: the head now, the events after the provider's
/// latency (its first token), no `[DONE]`.
fn events(response: &gateway_core::request::Response, latency: std::time::Duration) -> gateway_mock::Answer {
    let mut frames = vec![Frame::Pause(latency)];
    for event in gateway_core::stream::chunks_of(response) {
        let kind = event.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
        frames.push(Frame::Data(format!("event: {kind}\ndata: {}\n\n", Value::Object(event))));
    }
    gateway_mock::Answer::sse(frames)
}

/// Headers now; the content after the provider's latency; then the usage and `[DONE]`.
fn sse(content: &str, latency: std::time::Duration) -> gateway_mock::Answer {
    let chunk = json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": content}}]});
    let tail = json!({"object": "chat.completion.chunk", "choices": [], "usage": usage()});
    gateway_mock::Answer::sse([
        Frame::Pause(latency),
        Frame::Data(format!("data: {chunk}\n\n")),
        Frame::Data(format!("data: {tail}\n\ndata: [DONE]\n\n")),
    ])
}
