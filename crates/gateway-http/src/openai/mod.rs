//! The OpenAI dialect on the wire, every kind of call: the request of one attempt
//! ([`request`]: the kind's endpoint or a stored object's route; the caller's native body or
//! form with the source's `model`), a whole answer read and checked (JSON, or the bytes of
//! audio, a transcript as text, a stored file), and a stream (`chat.completion.chunk`s,
//! Responses events, `text_completion` chunks) read one event at a time under the watchdog and
//! the source's deadline ([`chunks`]). What an attempt holds of its answer is counted against
//! its budget (`max_response_bytes`) as it comes.
//!
//! The watchdog (SPEC §13): before the commit point it bounds the time from the attempt's start
//! (the wait for headers included) to the first chunk with something to show, whatever else
//! arrives meanwhile (role-only chunks, SSE comments); after it, every gap between chunks.

mod bytes;
mod chunks;
mod request;

use crate::classify::{NotFound, classify_code, classify_pooled_transport, classify_status, classify_transport, retry_after};
use crate::held::Held;
use crate::structured::Schemas;
use crate::{Shared, Source, header_wait};
use chunks::{Checked, Holding, Replayed, Sse, Translated};
use gateway_core::outcome::OutcomeClass;
use gateway_core::ports::Streamed;
use gateway_core::request::{Attempt, Kind, Outcome, Protocol, ProviderError, Raw, Request, Response};
use gateway_core::stream::{Assembly, opening_failure, streamed_upstream};
use request::Sent;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tokio::time::Instant;

fn transient(detail: &str) -> Outcome {
    Outcome::new(OutcomeClass::Transient, detail)
}

/// Sends the attempt's request; the response once its headers are in, or how it failed.
async fn post(src: &Source, request: &Request, stream: bool, shared: &Shared) -> Result<reqwest::Response, Outcome> {
    // A body that cannot be written as JSON fails as reqwest's `json` failed it, on sending.
    let sent = request::build(src, request, stream).map_err(|_| transient("reset"))?;
    let by_reqwest = |builder: reqwest::RequestBuilder| async move {
        builder.send().await.map_err(|e| {
            let (class, detail) = classify_transport(&e);
            Outcome::new(class, detail)
        })
    };
    let mut propagated = HeaderMap::new();
    if let Some(propagate) = &shared.propagate {
        propagate(&mut propagated);
    }
    let send = async {
        match sent {
            Sent::Json { kind, mut headers, body } => {
                headers.extend(propagated);
                crate::wire::json_headers(&mut headers);
                if let Some(direct) = &src.direct {
                    match direct.post(src.endpoint(kind), &headers, &body).await {
                        Ok(Some(response)) => return Ok(response),
                        Err(e) => {
                            let (class, detail) = classify_pooled_transport(&e);
                            return Err(Outcome::new(class, detail));
                        }
                        // A redirect: reqwest follows it.
                        Ok(None) => {}
                    }
                }
                by_reqwest(src.client.post(src.endpoint(kind).to_string()).headers(headers).body(body)).await
            }
            Sent::Built(builder) => by_reqwest(builder.headers(propagated)).await,
        }
    };
    let (wait, cause) = header_wait(src.timeout, src.watchdog.filter(|_| stream), shared.limits.header_timeout);
    match tokio::time::timeout(wait, send).await {
        Err(_) => Err(transient(cause)),
        Ok(sent) => sent,
    }
}

/// A non-2xx answer as an outcome: its class, Retry-After for a 429, and the provider's own
/// error body for a request it refused (passed on to the caller as it came).
async fn refusal(src: &Source, request: &Request, mut response: reqwest::Response, shared: &Shared) -> Outcome {
    let status = response.status();
    // On a stored object's route a 404 is the id the caller chose, never the source's fault.
    let not_found = if request.target().is_some() { NotFound::Request } else { src.not_found };
    let headers = response.headers().clone();
    let body = read_body(&mut response, &shared.hold()).await.unwrap_or_default();
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    let code = parsed.as_ref().and_then(|v| v.get("error")).and_then(error_code_of);
    let (class, detail) = classify_status(status, code.as_deref(), not_found, src.protocol);
    let retry_after = if class == OutcomeClass::RateLimited { shared.ignored.note(retry_after(&headers, &*shared.wall)) } else { None };
    let rate = shared.ignored.rate(&headers, &*shared.wall).map(Box::new);
    let provider_error = (class == OutcomeClass::RequestRejected).then(|| {
        Box::new(ProviderError {
        status: status.as_u16(),
        body: parsed.filter(|v| v.get("error").is_some()).unwrap_or_else(
            || json!({"error": {"message": String::from_utf8_lossy(&body), "type": "invalid_request_error", "param": null, "code": null}}),
        ),
    })
    });
    Outcome { class, detail, retry_after, provider_error, source_spent: false, rate }
}

/// What an answer's head says apart from its status: the provider's request id (its
/// `x-request-id`) and its rate-limit headers.
#[derive(Clone, Debug, Default)]
pub(crate) struct Head {
    pub(crate) request_id: Option<String>,
    pub(crate) rate: Option<gateway_core::request::RateSignal>,
}

impl Head {
    fn of(response: &reqwest::Response, shared: &Shared) -> Head {
        let headers = response.headers();
        Head {
            request_id: ["x-request-id", "request-id"]
                .iter()
                .find_map(|name| headers.get(*name))
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            rate: shared.ignored.rate(headers, &*shared.wall),
        }
    }
}

/// One attempt answered whole, without the total timeout (the caller applies it). A chat
/// request to a source with a watchdog is streamed and assembled, so the watchdog applies.
pub(crate) async fn exchange(src: &Source, request: &Request, shared: &Shared) -> Attempt {
    let answer = if streamed_upstream(request.kind(), src.watchdog) {
        assembled(src, request, shared).await
    } else {
        whole(src, request, shared).await
    };
    match answer {
        Ok((response, detail, rate)) => match checked(response, request, &shared.schemas) {
            Ok(response) => Attempt::success(response, detail).with_rate(rate),
            Err(outcome) => Attempt::ended(outcome.with_rate(rate)),
        },
        Err(outcome) => Attempt::ended(outcome),
    }
}

/// A usable answer that passes the request's structured check (on its text answers only). A
/// Responses answer that `failed` is charged as its error code says. (The answer of a stored
/// object's route is the provider's word on it, not judged: a stored response that failed is
/// what the caller asked to read.)
fn checked(response: Response, request: &Request, schemas: &Schemas) -> Result<Response, Outcome> {
    if request.target().is_some() {
        return Ok(response);
    }
    if request.kind() == Kind::Responses
        && let Some(outcome) = gateway_core::responses::failure(response.body())
    {
        return Err(outcome);
    }
    if !response.is_usable() {
        return Err(transient("empty"));
    }
    if let Some(outcome) = opening_failure(request.structured.as_ref(), response.text_answers()) {
        return Err(outcome);
    }
    if let Some(structured) = &request.structured {
        for text in response.text_answers() {
            schemas.check(structured, text).map_err(|why| Outcome::new(OutcomeClass::ResultInvalid, why.to_string()))?;
        }
    }
    Ok(response)
}

/// An answer, its detail and its rate signal.
type Answered = (Response, String, Option<gateway_core::request::RateSignal>);

/// Whether an answer of `request` may be other than JSON: audio, a transcript as text or
/// subtitles, a stored object's route.
fn may_be_raw(request: &Request) -> bool {
    matches!(request.kind(), Kind::Speech | Kind::Transcriptions | Kind::Translations) || request.target().is_some()
}

/// Whether an answer of `request` is bytes whatever they look like: a stored file's content
/// (a JSONL file of one line is JSON too, and must reach the caller byte for byte).
fn is_bytes(request: &Request) -> bool {
    request.target().is_some_and(|t| t.path.ends_with("/content"))
}

async fn whole(src: &Source, request: &Request, shared: &Shared) -> Result<Answered, Outcome> {
    let mut response = post(src, request, false, shared).await?;
    if !response.status().is_success() {
        return Err(refusal(src, request, response, shared).await);
    }
    let detail = format!("http_{}", response.status().as_u16());
    let head = Head::of(&response, shared);
    let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let rated = |outcome: Outcome| outcome.with_rate(head.rate);
    let bytes = read_body(&mut response, &shared.hold()).await.map_err(rated)?;
    let says_json = !is_bytes(request) && content_type.as_deref().is_none_or(|t| t.contains("json"));
    let body = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(body)) if says_json || !may_be_raw(request) => body,
        _ if may_be_raw(request) => {
            let raw = Raw { content_type: content_type.unwrap_or_else(|| "application/octet-stream".into()), bytes: bytes.into() };
            return Ok((Response::raw(request.kind(), raw).with_request_id(head.request_id), detail, head.rate));
        }
        _ => return Err(rated(transient("malformed_json"))),
    };
    if let Some(error) = body.get("error").filter(|e| e.is_object() && request.kind() != Kind::Responses) {
        // Some relays answer an error with a 2xx status.
        return Err(rated(error_in_answer((src.not_found, src.protocol), error, "error_in_2xx")));
    }
    let answer = gateway_core::translate::answer_as_sent(request.kind(), src.protocol, body, bytes.into());
    Ok((answer.with_request_id(head.request_id), detail, head.rate))
}

/// An answer streamed from the source and assembled chunk by chunk (every event counted
/// against the attempt's budget: the whole answer is held).
async fn assembled(src: &Source, request: &Request, shared: &Shared) -> Result<Answered, Outcome> {
    let mut chunks = match open(src, request, shared, &shared.hold(), Holding::Everything).await {
        Streamed::Ended(attempt) => return Err(attempt.into_parts().0),
        Streamed::Chunks(chunks) => chunks,
    };
    let mut assembly = Assembly::of(request.kind());
    while let Some(chunk) = chunks.next_chunk().await {
        assembly.push(&chunk.map_err(|outcome| outcome.with_rate(chunks.rate()))?);
    }
    let id = chunks.request_id().map(str::to_owned);
    Ok((assembly.finish().with_request_id(id), "http_200".to_owned(), chunks.rate()))
}

/// A streamed attempt for a caller that takes it as a stream: [`open`], holding the events
/// before the commit point, with the request's structured check run on the text answers when
/// the stream ends (the text it keeps for it is held under the same budget).
pub(crate) async fn open_checked(src: &Source, request: &Request, shared: &Shared) -> Streamed {
    let held = shared.hold();
    match (open(src, request, shared, &held, Holding::UntilCommit).await, &request.structured) {
        (Streamed::Chunks(inner), Some(structured)) => {
            Streamed::Chunks(Box::new(Checked::new(inner, request.kind(), shared.schemas.clone(), structured.clone(), held)))
        }
        (streamed, _) => streamed,
    }
}

/// Opens a streamed attempt: the chunks, or how it ended without them. A source that
/// answers a stream request with a whole JSON answer is replayed as chunks. `held` is the
/// attempt's share of what is held, `holding` what of the stream it holds.
async fn open(src: &Source, request: &Request, shared: &Shared, held: &Held, holding: Holding) -> Streamed {
    let started = Instant::now();
    let deadline = started + src.timeout;
    let mut response = match post(src, request, true, shared).await {
        Ok(response) => response,
        Err(outcome) => return Streamed::Ended(Attempt::ended(outcome)),
    };
    if !response.status().is_success() {
        return Streamed::Ended(Attempt::ended(refusal(src, request, response, shared).await));
    }
    let is_sse = response.headers().get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|t| t.starts_with("text/event-stream"));
    let head = Head::of(&response, shared);
    if request.kind().relays_bytes() {
        return Streamed::Chunks(Box::new(bytes::BytesStream::new(response, src, &shared.limits, (started, deadline), head)));
    }
    if !is_sse {
        let ended = |outcome: Outcome| Streamed::Ended(Attempt::ended(outcome.with_rate(head.rate)));
        let body = match read_body(&mut response, held).await {
            Ok(body) => body,
            Err(outcome) => return ended(outcome),
        };
        return match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Object(body)) if body.get("error").is_some_and(Value::is_object) && request.kind() != Kind::Responses => {
                ended(error_in_answer((src.not_found, src.protocol), &body["error"], "error_in_2xx"))
            }
            Ok(Value::Object(body)) => {
                if let Some(outcome) = gateway_core::responses::failure(&body).filter(|_| request.kind() == Kind::Responses) {
                    return ended(outcome);
                }
                let chunks = gateway_core::stream::chunks_of(&gateway_core::translate::answer(request.kind(), src.protocol, body));
                Streamed::Chunks(Box::new(Replayed::new(chunks.into(), head)))
            }
            _ => ended(transient("malformed_json")),
        };
    }
    // The events are read in the source's dialect, and reach the call in the caller's.
    let reader =
        Sse::new(response, src, request::wire_kind(src, request), &shared.limits, (held.clone(), holding), (started, deadline), head);
    let translation = gateway_core::translate::Stream::of(request.kind(), src.protocol);
    if translation.is_same() {
        return Streamed::Chunks(Box::new(reader));
    }
    Streamed::Chunks(Box::new(Translated::new(Box::new(reader), translation)))
}

/// The body, held under `held`'s budget (the attempt ends `body_too_large` past it). A body
/// that declares a length past the budget is refused before it is read.
async fn read_body(response: &mut reqwest::Response, held: &Held) -> Result<Vec<u8>, Outcome> {
    let declared = response.content_length().map(|length| usize::try_from(length).unwrap_or(usize::MAX));
    if let Some(length) = declared {
        held.fits(length)?;
    }
    // The answer keeps these bytes (`Response::sent`): no spare room past a declared length.
    let mut body = Vec::with_capacity(declared.unwrap_or(0));
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                held.take(chunk.len())?;
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err(Outcome::new(classify_transport(&e).0, "truncated")),
        }
    }
}

/// An error object inside a 2xx answer or a stream: the class its code decides (a refused
/// request keeps the provider's error, as a 400), else `Transient(otherwise)`.
fn error_in_answer((not_found, protocol): (NotFound, Protocol), error: &Value, otherwise: &str) -> Outcome {
    let code = error_code_of(error);
    match code.as_deref().and_then(|code| classify_code(code, not_found, protocol)) {
        Some(class) => Outcome {
            provider_error: (class == OutcomeClass::RequestRejected)
                .then(|| Box::new(ProviderError { status: 400, body: json!({"error": error}) })),
            ..Outcome::new(class, code.unwrap_or_default())
        },
        None => transient(otherwise),
    }
}

fn error_code_of(error: &Value) -> Option<String> {
    ["code", "type"].iter().find_map(|field| error.get(field).and_then(Value::as_str)).map(str::to_owned)
}
