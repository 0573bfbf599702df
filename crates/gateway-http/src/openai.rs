//! The OpenAI chat-completions and embeddings dialect: request bodies, and reading the answer
//! (plain JSON, or an SSE stream of `chat.completion.chunk` under the watchdog) into an attempt.

use crate::classify::{classify_code, classify_status, classify_transport, retry_after};
use crate::structured::Schemas;
use crate::{HttpLimits, Source};
use gateway_core::outcome::OutcomeClass;
use gateway_core::request::{Attempt, Payload, Request, Response, Usage};
use gateway_core::time::WallClock;
use serde_json::{Value, json};

type Failure = (OutcomeClass, String);

fn transient(detail: &str) -> Failure {
    (OutcomeClass::Transient, detail.to_owned())
}

/// One attempt of `request` on `src`, without the total timeout (the caller applies it).
pub(crate) async fn exchange(src: &Source, request: &Request, limits: &HttpLimits, wall: &dyn WallClock, schemas: &Schemas) -> Attempt {
    match run(src, request, limits, wall, schemas).await {
        Ok(attempt) => attempt,
        Err((class, detail)) => Attempt::failure(class, detail, None),
    }
}

async fn run(src: &Source, request: &Request, limits: &HttpLimits, wall: &dyn WallClock, schemas: &Schemas) -> Result<Attempt, Failure> {
    let (path, body, stream) = match &request.payload {
        Payload::Chat { messages, max_tokens, temperature, stream } => {
            let mut body = json!({"model": src.model, "messages": messages, "stream": stream});
            if let Some(max_tokens) = max_tokens {
                body["max_tokens"] = json!(max_tokens);
            }
            if let Some(temperature) = temperature {
                body["temperature"] = json!(temperature);
            }
            if *stream {
                body["stream_options"] = json!({"include_usage": true});
            }
            ("chat/completions", body, *stream)
        }
        Payload::Embedding { input } => ("embeddings", json!({"model": src.model, "input": input}), false),
    };
    let mut builder = src.client.post(format!("{}/{path}", src.base_url)).headers(src.headers.clone()).json(&body);
    if let Some(key) = &src.api_key {
        builder = builder.bearer_auth(key.expose());
    }
    let header_timeout = limits.header_timeout.unwrap_or(src.timeout);
    let mut response = match tokio::time::timeout(header_timeout, builder.send()).await {
        Err(_) => return Err(transient("header_timeout")),
        Ok(Err(e)) => {
            let (class, detail) = classify_transport(&e);
            return Err((class, detail.to_owned()));
        }
        Ok(Ok(response)) => response,
    };
    let status = response.status();
    if !status.is_success() {
        let headers = response.headers().clone();
        let body = read_body(&mut response, limits.max_response_bytes).await.unwrap_or_default();
        let code = error_code(&body);
        let (class, detail) = classify_status(status, code.as_deref(), src.not_found);
        let wait = if class == OutcomeClass::RateLimited { retry_after(&headers, wall) } else { None };
        return Ok(Attempt::failure(class, detail, wait));
    }
    let detail = format!("http_{}", status.as_u16());
    let (content, usage) = if stream {
        read_stream(src, &mut response, limits.max_response_bytes).await?
    } else {
        let body = read_body(&mut response, limits.max_response_bytes).await?;
        let value: Value = serde_json::from_slice(&body).map_err(|_| transient("malformed_json"))?;
        if let Some(error) = value.get("error") {
            // Some relays answer an error with a 2xx status.
            return Err(error_in_answer(src, error, "error_in_2xx"));
        }
        if let Payload::Embedding { .. } = request.payload {
            return Ok(Attempt::success(embeddings(&value)?, detail));
        }
        let content = value.pointer("/choices/0/message/content").and_then(Value::as_str).unwrap_or_default().to_owned();
        (content, usage_of(&value))
    };
    if content.trim().is_empty() {
        return Err(transient("empty"));
    }
    if let Some(Err(why)) = request.structured.as_ref().map(|check| schemas.check(check, &content)) {
        return Err((OutcomeClass::ResultInvalid, why));
    }
    Ok(Attempt::success(Response::Chat { content, usage }, detail))
}

/// The body, up to `cap` bytes.
async fn read_body(response: &mut reqwest::Response, cap: usize) -> Result<Vec<u8>, Failure> {
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > cap {
                    return Err(transient("body_too_large"));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err((classify_transport(&e).0, "truncated".to_owned())),
        }
    }
}

/// Reads `data:` events until `[DONE]`, concatenating `choices[0].delta.content`. The watchdog
/// bounds the wait for the first chunk and every next one.
async fn read_stream(src: &Source, response: &mut reqwest::Response, cap: usize) -> Result<(String, Option<Usage>), Failure> {
    let mut buffer: Vec<u8> = Vec::new();
    let mut content = String::new();
    let mut usage = None;
    let mut received = 0usize;
    loop {
        let next = match src.watchdog {
            Some(limit) => tokio::time::timeout(limit, response.chunk()).await.map_err(|_| transient("watchdog"))?,
            None => response.chunk().await,
        };
        let chunk = match next {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Err(transient("truncated_stream")),
            Err(_) => return Err(transient("truncated_stream")),
        };
        received += chunk.len();
        if received > cap {
            return Err(transient("body_too_large"));
        }
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let line = std::str::from_utf8(&line).map_err(|_| transient("malformed_sse"))?.trim();
            let Some(data) = line.strip_prefix("data:").map(str::trim) else { continue };
            if data == "[DONE]" {
                return Ok((content, usage));
            }
            let event: Value = serde_json::from_str(data).map_err(|_| transient("malformed_sse"))?;
            if let Some(error) = event.get("error") {
                return Err(error_in_answer(src, error, "error_in_stream"));
            }
            if let Some(piece) = event.pointer("/choices/0/delta/content").and_then(Value::as_str) {
                content.push_str(piece);
            }
            if let Some(u) = usage_of(&event) {
                usage = Some(u);
            }
        }
    }
}

/// An error object inside a 2xx answer or a stream: the class its code decides, else
/// `Transient(otherwise)`.
fn error_in_answer(src: &Source, error: &Value, otherwise: &str) -> Failure {
    let code = error_code_of(error);
    match code.as_deref().and_then(|code| classify_code(code, src.not_found)) {
        Some(class) => (class, code.unwrap_or_default()),
        None => transient(otherwise),
    }
}

fn error_code_of(error: &Value) -> Option<String> {
    ["code", "type"].iter().find_map(|field| error.get(field).and_then(Value::as_str)).map(str::to_owned)
}

/// `error.code` (or `error.type`) of an error body.
fn error_code(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    error_code_of(value.get("error")?)
}

fn usage_of(value: &Value) -> Option<Usage> {
    let usage = value.get("usage")?;
    let count = |field: &str| usage.get(field).and_then(Value::as_u64).map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
    Some(Usage { prompt_tokens: count("prompt_tokens"), completion_tokens: count("completion_tokens") })
}

fn embeddings(value: &Value) -> Result<Response, Failure> {
    let data = value.get("data").and_then(Value::as_array).ok_or_else(|| transient("malformed_json"))?;
    if data.is_empty() {
        return Err(transient("empty"));
    }
    let vectors = data
        .iter()
        .map(|item| {
            let numbers = item.get("embedding").and_then(Value::as_array).ok_or_else(|| transient("malformed_json"))?;
            numbers.iter().map(|n| n.as_f64().map(|f| f as f32).ok_or_else(|| transient("malformed_json"))).collect::<Result<Vec<f32>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    if vectors.iter().any(Vec::is_empty) {
        return Err(transient("empty"));
    }
    Ok(Response::Embedding { vectors, usage: usage_of(value) })
}
