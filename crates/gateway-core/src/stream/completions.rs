//! Legacy completions (`/completions`) as a stream: each chunk is a whole `text_completion`
//! object whose choices carry the next piece of `text` (no `delta`), `finish_reason` null until
//! the last, then a usage-only chunk when asked for, then `[DONE]`.

use super::{Choices, Chunk, keep_head, merge_finish_and_logprobs, replayed};
use crate::request::{Kind, Object, Response};
use serde_json::{Value, json};

/// Whether `chunk` is the commit point: some choice brings text.
pub fn commits(chunk: &Chunk) -> bool {
    chunk
        .get("choices")
        .and_then(Value::as_array)
        .is_some_and(|choices| choices.iter().any(|c| c.get("text").and_then(Value::as_str).is_some_and(|t| !t.is_empty())))
}

/// A `text_completion` assembled chunk by chunk: per choice index its text concatenated, its
/// legacy logprobs' lists extended, the last finish reason; the usage of the chunk carrying it;
/// `id`, `created`, `model` and `system_fingerprint` from the first chunk that has them.
#[derive(Clone, Debug, Default)]
pub struct Assembly {
    body: Object,
    choices: Choices,
}

impl Assembly {
    /// Merges `chunk` into the answer so far.
    pub fn push(&mut self, chunk: &Chunk) {
        keep_head(&mut self.body, chunk, &["id", "created", "model", "system_fingerprint"]);
        for piece in chunk.get("choices").and_then(Value::as_array).into_iter().flatten() {
            let index = piece.get("index").and_then(Value::as_u64).unwrap_or(0);
            let choice = self.choices.at(index, || json!({"index": index, "text": "", "logprobs": null, "finish_reason": null}));
            if let (Some(Value::String(have)), Some(more)) = (choice.get_mut("text"), piece.get("text").and_then(Value::as_str)) {
                have.push_str(more);
            }
            merge_finish_and_logprobs(choice, piece);
        }
    }

    /// The `text_completion` of the chunks pushed.
    pub fn finish(self) -> Response {
        let Assembly { body: fields, choices } = self;
        let mut body = Object::new();
        body.insert("object".into(), json!("text_completion"));
        body.extend(fields);
        body.insert("choices".into(), Value::Array(choices.into_sorted().into_iter().map(Value::Object).collect()));
        Response::new(Kind::Completions, body)
    }
}

/// The chunks of a whole `text_completion`: one per choice with its whole text, then one with
/// the usage, if any.
pub fn chunks_of(response: &Response) -> Vec<Chunk> {
    replayed(response.body(), "text_completion", &["id", "created", "model", "system_fingerprint"], response.choices().iter().cloned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::assemble;

    fn chunk(value: Value) -> Chunk {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn legacy_chunks_commit_on_text_and_assemble_into_the_completion() {
        let chunks: Vec<Chunk> = [
            json!({"id": "cmpl-1", "object": "text_completion", "created": 3, "model": "m", "choices": [{"index": 0, "text": "", "logprobs": null, "finish_reason": null}]}),
            json!({"id": "cmpl-1", "choices": [{"index": 0, "text": "Hel", "logprobs": {"tokens": ["Hel"], "token_logprobs": [-0.1]}, "finish_reason": null}]}),
            json!({"id": "cmpl-1", "choices": [{"index": 0, "text": "lo", "logprobs": {"tokens": ["lo"], "token_logprobs": [-0.2]}, "finish_reason": "length"}, {"index": 1, "text": "Hi", "finish_reason": "stop"}]}),
            json!({"id": "cmpl-1", "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}}),
        ]
        .into_iter()
        .map(chunk)
        .collect();
        assert_eq!(chunks.iter().map(commits).collect::<Vec<_>>(), [false, true, true, false]);
        let whole = assemble(Kind::Completions, &chunks);
        assert!(whole.is_usable());
        assert_eq!(whole.body()["object"], "text_completion");
        assert_eq!(whole.choices()[0]["text"], "Hello");
        assert_eq!(whole.choices()[0]["finish_reason"], "length");
        assert_eq!(whole.choices()[0]["logprobs"], json!({"tokens": ["Hel", "lo"], "token_logprobs": [-0.1, -0.2]}));
        assert_eq!(whole.choices()[1]["text"], "Hi");
        assert_eq!(whole.usage().map(|u| u.total()), Some(5));
        let again = assemble(Kind::Completions, &chunks_of(&whole));
        assert_eq!(again.body(), whole.body(), "a whole completion replays as chunks that assemble back");
    }
}
