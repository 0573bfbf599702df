//! What a request carries besides a JSON body: where it goes when it is not a kind's create
//! endpoint (a stored object's route: `GET responses/{id}`), a multipart form (an upload), and an
//! answer that is not JSON (audio, a file's bytes, a transcript as text).

use bytes::Bytes;
use std::fmt;

/// The HTTP method of a request to a stored object's route.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// Reads.
    Get,
    /// Acts (`…/cancel`) or creates.
    Post,
    /// Deletes.
    Delete,
}

/// A route below a provider's base URL, other than the create endpoint of the request's kind:
/// `GET responses/resp_1`, `POST responses/resp_1/cancel`, `GET files/file-1/content?…`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The method.
    pub method: Method,
    /// The path below the base URL, without a leading `/` (ids percent-encoded as sent).
    pub path: String,
    /// The query string as the caller sent it, without `?` (empty: none).
    pub query: String,
}

impl Target {
    /// `method` on `path` with no query.
    pub fn new(method: Method, path: impl Into<String>) -> Self {
        Target { method, path: path.into(), query: String::new() }
    }

    /// The same target with the caller's query string.
    pub fn with_query(self, query: impl Into<String>) -> Self {
        Target { query: query.into(), ..self }
    }
}

/// One part of a multipart form: a text field (no file name) or a file.
#[derive(Clone, PartialEq, Eq)]
pub struct Part {
    /// The field name (`file`, `image[]`, `model`, `timestamp_granularities[]` …).
    pub name: String,
    /// The file name, for a file part.
    pub filename: Option<String>,
    /// The part's content type, when the caller gave one.
    pub content_type: Option<String>,
    /// The content, shared (a retried attempt sends it again without a copy).
    pub data: Bytes,
}

impl Part {
    /// A text field.
    pub fn text(name: impl Into<String>, value: &str) -> Self {
        Part { name: name.into(), filename: None, content_type: None, data: Bytes::copy_from_slice(value.as_bytes()) }
    }

    /// A file part.
    pub fn file(name: impl Into<String>, filename: impl Into<String>, content_type: Option<String>, data: Bytes) -> Self {
        Part { name: name.into(), filename: Some(filename.into()), content_type, data }
    }

    /// The value of a text field, if it is UTF-8.
    pub fn value(&self) -> Option<&str> {
        if self.filename.is_some() { None } else { std::str::from_utf8(&self.data).ok() }
    }
}

impl fmt::Debug for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Part")
            .field("name", &self.name)
            .field("filename", &self.filename)
            .field("content_type", &self.content_type)
            .field("bytes", &self.data.len())
            .finish()
    }
}

/// A multipart form, its parts in the caller's order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Form {
    /// The parts.
    pub parts: Vec<Part>,
}

impl Form {
    /// The value of the first text field named `name`.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.parts.iter().find(|p| p.name == name).and_then(Part::value)
    }

    /// The same form with the text field `name` set to `value` (replacing every part of that
    /// name, or added at the front: a provider reads `model` before the file).
    pub fn with_value(&self, name: &str, value: &str) -> Form {
        let mut parts: Vec<Part> = self.parts.iter().filter(|p| p.name != name).cloned().collect();
        parts.insert(0, Part::text(name, value));
        Form { parts }
    }
}

/// An answer that is not JSON: audio, a file's bytes, a transcript as text or subtitles.
#[derive(Clone, PartialEq, Eq)]
pub struct Raw {
    /// The provider's content type.
    pub content_type: String,
    /// The bytes, as the provider sent them.
    pub bytes: Bytes,
}

impl fmt::Debug for Raw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Raw").field("content_type", &self.content_type).field("bytes", &self.bytes.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_sets_a_field_once_at_its_front_and_keeps_the_rest_in_order() {
        let form = Form {
            parts: vec![
                Part::text("model", "chat"),
                Part::text("language", "en"),
                Part::file("file", "a.wav", Some("audio/wav".into()), Bytes::from_static(b"RIFF")),
                Part::text("model", "again"),
            ],
        };
        assert_eq!(form.value("model"), Some("chat"));
        assert_eq!(form.value("file"), None, "a file is no text field");
        let set = form.with_value("model", "whisper-1");
        let names: Vec<&str> = set.parts.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["model", "language", "file"]);
        assert_eq!(set.value("model"), Some("whisper-1"));
        assert!(format!("{:?}", set.parts[2]).contains("bytes: 4"), "a part's debug shows its size, not its content");
    }
}
