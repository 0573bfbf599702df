//! OpenAI's bodies in their smallest shapes, for answers written by hand: a chat completion, a
//! streamed chunk, the end of a stream, an error.

use serde_json::{Value, json};

/// The event that ends an OpenAI stream.
pub const DONE: &str = "data: [DONE]\n\n";

/// A chat completion whose one choice says `content` (finish reason `stop`; 7 prompt and 3
/// completion tokens).
pub fn completion(content: &str) -> Value {
    json!({
        "id": "c1", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3}
    })
}

/// The SSE event of one streamed chunk whose one choice's delta says `content`.
pub fn chunk(content: &str) -> String {
    event(&json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": content}}]}))
}

/// `value` as one SSE event: `data: {value}` and a blank line.
pub fn event(value: &Value) -> String {
    format!("data: {value}\n\n")
}

/// OpenAI's error body: `{"error": {"message", "type", "code"}}`.
pub fn error(code: &str, message: &str, kind: &str) -> Value {
    json!({"error": {"message": message, "type": kind, "code": code}})
}
