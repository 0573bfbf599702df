//! A binary answer (speech audio) as a stream: its bytes in the pieces they come in, each as a
//! chunk `{"type": "bytes", "content_type": …, "data": <base64>}` (a chunk is a JSON object;
//! the proxy writes the bytes back out as they were). The commit point is the first piece with
//! bytes: a provider that fails before it is asked again unseen; one that breaks after it ends
//! the body short, and the proxy breaks the connection rather than end a file cleanly.

use super::Chunk;
use crate::request::{Kind, Object, Raw, Response};
use base64::Engine;
use serde_json::{Value, json};

const ENGINE: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// A chunk of `data`, a piece of an answer of `content_type`.
pub fn chunk(content_type: &str, data: &[u8]) -> Chunk {
    let mut chunk = Object::new();
    chunk.insert("type".into(), json!("bytes"));
    chunk.insert("content_type".into(), json!(content_type));
    chunk.insert("data".into(), json!(ENGINE.encode(data)));
    chunk
}

/// The bytes a chunk carries (none for a chunk that is not one of bytes).
pub fn data(chunk: &Chunk) -> Option<Vec<u8>> {
    ENGINE.decode(chunk.get("data")?.as_str()?).ok()
}

/// The content type of the answer a chunk belongs to.
pub fn content_type(chunk: &Chunk) -> Option<&str> {
    chunk.get("content_type").and_then(Value::as_str)
}

/// Whether `chunk` is the commit point: it carries bytes.
pub fn commits(chunk: &Chunk) -> bool {
    chunk.get("data").and_then(Value::as_str).is_some_and(|d| !d.is_empty())
}

/// The answer's bytes gathered piece by piece.
#[derive(Clone, Debug, Default)]
pub struct Assembly {
    content_type: Option<String>,
    bytes: Vec<u8>,
}

impl Assembly {
    /// Adds `chunk`'s bytes.
    pub fn push(&mut self, chunk: &Chunk) {
        if self.content_type.is_none() {
            self.content_type = content_type(chunk).map(str::to_owned);
        }
        if let Some(data) = data(chunk) {
            self.bytes.extend_from_slice(&data);
        }
    }

    /// The whole answer.
    pub fn finish(self) -> Response {
        let content_type = self.content_type.unwrap_or_else(|| "application/octet-stream".into());
        Response::raw(Kind::Speech, Raw { content_type, bytes: self.bytes.into() })
    }
}

/// A whole binary answer as one chunk.
pub fn chunks_of(response: &Response) -> Vec<Chunk> {
    match response.raw_body() {
        Some(raw) => vec![chunk(&raw.content_type, &raw.bytes)],
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_travel_in_pieces_and_come_back_whole() {
        let audio: Vec<u8> = (0..=255u8).chain([0xff, 0xfe, 0x00]).collect();
        let pieces = [chunk("audio/wav", &audio[..100]), chunk("audio/wav", &audio[100..])];
        assert!(pieces.iter().all(commits));
        assert!(!commits(&chunk("audio/wav", b"")));
        let mut assembly = Assembly::default();
        pieces.iter().for_each(|p| assembly.push(p));
        let whole = assembly.finish();
        assert_eq!(whole.raw_body().map(|r| (r.content_type.as_str(), r.bytes.to_vec())), Some(("audio/wav", audio.clone())));
        assert!(whole.is_usable());
        assert_eq!(chunks_of(&whole).iter().filter_map(data).collect::<Vec<_>>().concat(), audio, "a whole answer replays as one piece");
    }
}
