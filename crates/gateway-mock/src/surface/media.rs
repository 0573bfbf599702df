//! Legacy completions, moderations, images and audio of a [`Surface`](super::Surface) account,
//! each answering as OpenAI does: a completion echoes its prompt (streamed as `text_completion`
//! chunks, then `[DONE]`); a moderation flags an input saying `HATE`; an image is its prompt's
//! bytes (base64), an edit says how many images it got; a transcript or translation says how
//! many bytes of audio came, as JSON or as text with `text/plain` (`response_format`); speech is
//! [`speech_bytes`] of its input, with the audio's content type.

use super::{error, said};
use crate::answer::{Answer, Frame};
use crate::recording::Received;
use base64::Engine;
use gateway_core::request::{Kind, Response};
use serde_json::{Value, json};

/// The audio bytes the mock speaks for `input`: an MP3-like head, the input, and bytes that are
/// not UTF-8 (so a path that mangles binary is caught).
pub fn speech_bytes(input: &str) -> Vec<u8> {
    let mut bytes = b"ID3\x04\x00".to_vec();
    bytes.extend_from_slice(input.as_bytes());
    bytes.extend_from_slice(&[0xff, 0xfb, 0x90, 0x00, 0x80, 0xfe]);
    bytes
}

fn usage() -> Value {
    json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})
}

/// `POST /completions`.
pub(super) fn completion(request: &Received) -> Answer {
    let body = &request.body;
    let n = body["n"].as_u64().unwrap_or(1);
    let choices: Vec<Value> = (0..n)
        .map(|i| json!({"text": format!("echo: {}", said(request)), "index": i, "logprobs": null, "finish_reason": "stop"}))
        .collect();
    let whole = json!({"id": "cmpl-mock", "object": "text_completion", "created": 1_700_000_000, "model": body["model"],
                       "choices": choices, "usage": usage()});
    if !request.wants_stream() {
        return Answer::json(200, &whole);
    }
    let response = Response::new(Kind::Completions, whole.as_object().cloned().unwrap_or_default());
    let mut frames: Vec<Frame> = gateway_core::stream::completions::chunks_of(&response)
        .into_iter()
        .filter(|chunk| body["stream_options"]["include_usage"] == json!(true) || chunk.get("usage").is_none())
        .map(|chunk| Frame::Data(format!("data: {}\n\n", Value::Object(chunk))))
        .collect();
    frames.push(Frame::data("data: [DONE]\n\n"));
    Answer::sse(frames)
}

const CATEGORIES: [&str; 13] = [
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/instructions",
    "self-harm/intent",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
];

/// `POST /moderations`.
pub(super) fn moderation(request: &Received) -> Answer {
    let flagged = said(request).contains("HATE") || request.body["input"].to_string().contains("HATE");
    let categories: serde_json::Map<String, Value> = CATEGORIES.iter().map(|c| ((*c).to_owned(), json!(flagged && *c == "hate"))).collect();
    let scores: serde_json::Map<String, Value> =
        CATEGORIES.iter().map(|c| ((*c).to_owned(), json!(if flagged && *c == "hate" { 0.97 } else { 0.001 }))).collect();
    let applied: serde_json::Map<String, Value> = CATEGORIES.iter().map(|c| ((*c).to_owned(), json!(["text"]))).collect();
    let result = json!({"flagged": flagged, "categories": categories, "category_scores": scores, "category_applied_input_types": applied});
    Answer::json(200, &json!({"id": "modr-mock", "model": request.body["model"], "results": [result]}))
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `POST /images/generations`.
pub(super) fn images(request: &Received) -> Answer {
    let prompt = said(request);
    let n = request.body["n"].as_u64().unwrap_or(1);
    let data: Vec<Value> = (0..n).map(|_| json!({"b64_json": b64(format!("png:{prompt}").as_bytes()), "revised_prompt": prompt})).collect();
    Answer::json(200, &json!({"created": 1_700_000_000, "data": data}))
}

/// `POST /images/edits` (multipart: `image` or `image[]`, `mask`, `prompt`).
pub(super) fn image_edits(request: &Received) -> Answer {
    let Some(form) = request.form() else { return error(400, "the body must be multipart/form-data", None, None) };
    let images = form.iter().filter(|p| p.name == "image" || p.name == "image[]").count();
    if images == 0 {
        return error(400, "Missing required parameter: 'image'.", Some("image"), None);
    }
    let prompt = request.form_value("prompt").unwrap_or_default();
    let data = json!([{"b64_json": b64(format!("edited {images} image(s): {prompt}").as_bytes())}]);
    Answer::json(200, &json!({"created": 1_700_000_000, "data": data}))
}

/// `POST /audio/transcriptions` and `/audio/translations` (multipart: `file`, `model`,
/// `response_format`); `what` names the answer.
pub(super) fn transcript(request: &Received, what: &str) -> Answer {
    let Some(form) = request.form() else { return error(400, "the body must be multipart/form-data", None, None) };
    let Some(file) = form.iter().find(|p| p.name == "file" && p.filename.is_some()) else {
        return error(400, "Missing required parameter: 'file'.", Some("file"), None);
    };
    let text = format!("{what} of {} bytes of {}", file.data.len(), file.filename.as_deref().unwrap_or("upload"));
    match request.form_value("response_format").as_deref() {
        Some("text") => Answer::bytes(200, "text/plain; charset=utf-8", format!("{text}\n")),
        Some("srt") => Answer::bytes(200, "text/plain; charset=utf-8", format!("1\n00:00:00,000 --> 00:00:01,000\n{text}\n")),
        Some("vtt") => Answer::bytes(200, "text/plain; charset=utf-8", format!("WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n{text}\n")),
        Some("verbose_json") => {
            Answer::json(200, &json!({"task": what, "language": "english", "duration": 1.0, "text": text, "segments": []}))
        }
        _ => Answer::json(
            200,
            &json!({"text": text, "usage": {"type": "tokens", "input_tokens": 4, "output_tokens": 6, "total_tokens": 10}}),
        ),
    }
}

/// `POST /audio/speech`: [`speech_bytes`] of its input, in pieces of 16 KiB; an input saying
/// `CUT` ends after its first piece with the connection broken.
pub(super) fn speech(request: &Received) -> Answer {
    let Some(input) = request.body["input"].as_str() else {
        return error(400, "Missing required parameter: 'input'.", Some("input"), None);
    };
    let kind = match request.body["response_format"].as_str().unwrap_or("mp3") {
        "opus" => "audio/opus",
        "aac" => "audio/aac",
        "flac" => "audio/flac",
        "wav" => "audio/wav",
        "pcm" => "audio/pcm",
        _ => "audio/mpeg",
    };
    let audio = bytes::Bytes::from(speech_bytes(input));
    let mut frames: Vec<Frame> = audio.chunks(16 << 10).map(|piece| Frame::Bytes(audio.slice_ref(piece))).collect();
    if input.contains("CUT") {
        frames.truncate(1);
        // The piece goes out before the break.
        frames.extend([Frame::Pause(std::time::Duration::from_millis(5)), Frame::Cut]);
    }
    Answer::streamed(kind, frames)
}
