//! What the gateway reads of a request body, by kind, before the call: the scope (`model`), how
//! the caller takes the answer (`stream`, `stream_options`), the structured check
//! (`response_format`, or a Responses call's `text.format`), and what a kind cannot go without;
//! every error names the field. The rest passes on as the caller wrote it.

use super::ApiError;
use gateway_core::request::{Kind, Object, Request, Structured};
use gateway_core::stream::StructuredStream;
use gateway_http::structured::Schemas;
use serde_json::{Value, json};

fn field<'a>(body: &'a Object, name: &str) -> Option<&'a Value> {
    body.get(name).filter(|v| !v.is_null())
}

/// The `model` field: the scope.
pub fn model(body: &Object) -> Result<String, ApiError> {
    match field(body, "model") {
        Some(Value::String(model)) if !model.is_empty() => Ok(model.clone()),
        Some(_) => Err(ApiError::invalid("model", "model must be a non-empty string (a scope of this gateway)")),
        None => Err(ApiError::invalid("model", "model is required (a scope of this gateway)")),
    }
}

/// What a body of a kind that streams asks of the gateway itself, beyond the request passed on.
#[derive(Debug)]
pub struct ChatAsk {
    /// The gateway request (the caller's body).
    pub request: Request,
    /// The caller wants SSE.
    pub stream: bool,
    /// The caller wants the usage chunk at the end of the stream.
    pub include_usage: bool,
}

/// The header by which one request overrides its scope's `structured_stream`.
pub const STRUCTURED_STREAM_HEADER: &str = "x-gateway-structured-stream";

/// This request's own `structured_stream`, from its header: `validated` or `first_token`.
pub fn structured_stream(headers: &axum::http::HeaderMap) -> Result<Option<StructuredStream>, ApiError> {
    let Some(value) = headers.get(STRUCTURED_STREAM_HEADER) else { return Ok(None) };
    let parsed = value.to_str().ok().and_then(StructuredStream::parse);
    parsed.map(Some).ok_or_else(|| {
        let shown = String::from_utf8_lossy(value.as_bytes()).chars().take(40).collect::<String>();
        ApiError::invalid(
            STRUCTURED_STREAM_HEADER,
            format!("{STRUCTURED_STREAM_HEADER} must be \"validated\" or \"first_token\", not {shown:?}"),
        )
    })
}

/// The `stream` field (absent: false).
fn stream_flag(body: &Object) -> Result<bool, ApiError> {
    match field(body, "stream") {
        None => Ok(false),
        Some(v) => v.as_bool().ok_or_else(|| ApiError::invalid("stream", "stream must be a boolean")),
    }
}

/// `stream_options.include_usage` (absent: false).
fn include_usage(body: &Object) -> Result<bool, ApiError> {
    match field(body, "stream_options") {
        None => Ok(false),
        Some(Value::Object(options)) => match options.get("include_usage").filter(|v| !v.is_null()) {
            None => Ok(false),
            Some(v) => v.as_bool().ok_or_else(|| ApiError::invalid("stream_options.include_usage", "include_usage must be a boolean")),
        },
        Some(_) => Err(ApiError::invalid("stream_options", "stream_options must be an object")),
    }
}

/// A chat-completions body: the request, and how the caller takes the answer.
pub fn chat_request(body: Object, schemas: &Schemas) -> Result<ChatAsk, ApiError> {
    match field(&body, "messages") {
        Some(Value::Array(list)) if !list.is_empty() => {}
        Some(Value::Array(_)) => return Err(ApiError::invalid("messages", "messages must not be empty")),
        _ => return Err(ApiError::invalid("messages", "messages is required: an array of messages")),
    }
    let (stream, include_usage) = (stream_flag(&body)?, include_usage(&body)?);
    let structured = structured_check(&body, schemas)?;
    let mut request = Request::native(Kind::Chat, body);
    request.structured = structured;
    Ok(ChatAsk { request, stream, include_usage })
}

/// A Responses body: the request, and whether the caller takes it as a stream. Its
/// `text.format` (`json_schema`, `json_object`) is checked locally too; `previous_response_id`
/// and `conversation` must be ids (the gateway routes by them).
pub fn responses_request(body: Object, schemas: &Schemas) -> Result<ChatAsk, ApiError> {
    match field(&body, "input") {
        None if field(&body, "prompt").is_some() || field(&body, "previous_response_id").is_some() => {}
        Some(Value::String(_) | Value::Array(_)) => {}
        Some(_) => return Err(ApiError::invalid("input", "input must be a string or an array of input items")),
        None => return Err(ApiError::invalid("input", "input is required: a string or an array of input items")),
    }
    for name in ["previous_response_id", "conversation"] {
        let id = match field(&body, name) {
            None => continue,
            Some(value) => gateway_core::responses::conversation_id(value).ok_or_else(|| {
                ApiError::invalid(
                    name,
                    format!("{name} must be an id (a string{})", if name == "conversation" { " or {\"id\": …}" } else { "" }),
                )
            })?,
        };
        gateway_core::affinity::check_id(id).map_err(|why| ApiError::invalid(name, format!("{name} is not an id: {why}")))?;
    }
    let stream = stream_flag(&body)?;
    let structured = match field(&body, "text").and_then(|text| text.get("format")).filter(|f| !f.is_null()) {
        None => None,
        Some(format) => format_check(format, "text.format", format.get("schema"), schemas)?,
    };
    let mut request = Request::native(Kind::Responses, body);
    request.structured = structured;
    Ok(ChatAsk { request, stream, include_usage: false })
}

/// A legacy completions body (`prompt` required), whole or streamed.
pub fn completions_request(body: Object) -> Result<ChatAsk, ApiError> {
    match field(&body, "prompt") {
        Some(Value::String(_)) => {}
        Some(Value::Array(items)) if !items.is_empty() => {}
        _ => return Err(ApiError::invalid("prompt", "prompt is required: a string, an array of strings or of token arrays")),
    }
    let (stream, include_usage) = (stream_flag(&body)?, include_usage(&body)?);
    Ok(ChatAsk { request: Request::native(Kind::Completions, body), stream, include_usage })
}

/// A body of a kind that is answered whole, with the fields it cannot go without: a string or
/// array `input` (moderations), a `prompt` (images), an `input` and a `voice` (speech).
pub fn whole_request(kind: Kind, body: Object) -> Result<Request, ApiError> {
    let required: &[(&str, &str)] = match kind {
        Kind::Moderations => &[("input", "a string, an array of strings or of text and image parts")],
        Kind::Images => &[("prompt", "a text description of the image")],
        Kind::Speech => &[("input", "the text to speak"), ("voice", "a voice name or {\"id\": …}")],
        _ => &[],
    };
    for (name, what) in required {
        if field(&body, name).is_none() {
            return Err(ApiError::invalid(name, format!("{name} is required: {what}")));
        }
    }
    if stream_flag(&body)? {
        return Err(ApiError::invalid("stream", format!("streamed {kind} are not served by this gateway: send stream = false")));
    }
    Ok(Request::native(kind, body))
}

/// A batch body: `input_file_id` (an id: the gateway routes by it), `endpoint` and
/// `completion_window`.
pub fn batch_request(body: Object) -> Result<Request, ApiError> {
    let Some(Value::String(file)) = field(&body, "input_file_id") else {
        return Err(ApiError::invalid("input_file_id", "input_file_id is required: the id of an uploaded batch file"));
    };
    gateway_core::affinity::check_id(file)
        .map_err(|why| ApiError::invalid("input_file_id", format!("input_file_id is not an id: {why}")))?;
    for name in ["endpoint", "completion_window"] {
        if !field(&body, name).is_some_and(Value::is_string) {
            return Err(ApiError::invalid(name, format!("{name} is required: a string")));
        }
    }
    Ok(Request::native(Kind::Batches, body))
}

/// The local check of a `response_format` (it is passed on as well): JSON mode wants a JSON
/// object; a JSON schema is bounded and compiled once. Other formats are the provider's alone.
fn structured_check(body: &Object, schemas: &Schemas) -> Result<Option<Structured>, ApiError> {
    let Some(format) = field(body, "response_format") else { return Ok(None) };
    format_check(format, "response_format", format.get("json_schema").and_then(|s| s.get("schema")), schemas)
}

/// The check a format asks for (`param` names it in errors): `json_object` wants a JSON
/// object, `json_schema` its `schema` (nested in chat's `json_schema`, flat in a Responses
/// `text.format`), bounded and compiled once; other formats are the provider's alone.
fn format_check(format: &Value, param: &str, schema: Option<&Value>, schemas: &Schemas) -> Result<Option<Structured>, ApiError> {
    if !format.is_object() {
        return Err(ApiError::invalid(param, format!("{param} must be an object")));
    }
    let schema_param = if param == "response_format" { "response_format.json_schema.schema".to_owned() } else { format!("{param}.schema") };
    match format.get("type").and_then(Value::as_str) {
        Some("json_object") => Ok(Some(Structured::JsonSchema(json!({"type": "object"})))),
        Some("json_schema") => match schema {
            Some(schema) => {
                schemas.compile(schema).map_err(|why| ApiError::invalid(&schema_param, why.to_string()))?;
                Ok(Some(Structured::JsonSchema(schema.clone())))
            }
            None => Err(ApiError::invalid(&schema_param, "a json_schema format needs its schema")),
        },
        Some(_) => Ok(None),
        None => Err(ApiError::invalid(&format!("{param}.type"), format!("{param} needs a type (text, json_object, json_schema)"))),
    }
}

/// An embeddings body: the request, passed on as written (`dimensions`, `encoding_format`,
/// token arrays), its vectors answered as the provider encoded them.
pub fn embeddings_request(body: Object) -> Result<Request, ApiError> {
    match field(&body, "input") {
        Some(Value::String(_)) => {}
        Some(Value::Array(items)) if !items.is_empty() => {}
        _ => return Err(ApiError::invalid("input", "input is required: a string, an array of strings or an array of token arrays")),
    }
    Ok(Request::native(Kind::Embeddings, body))
}
