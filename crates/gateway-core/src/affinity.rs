//! State a provider keeps for a call, named by ids (SPEC §13: conversation state stays where it
//! lives): which ids an answer makes, so the gateway remembers the source that holds them
//! ([`kept_ids`]); which ids a request refers to, so it goes to that source and nowhere else
//! ([`references`]); and what an id may look like ([`check_id`]).

use crate::request::{Kind, Request, Response};
use serde_json::Value;

/// The longest id taken (OpenAI's are under 100 characters).
pub const MAX_ID_LEN: usize = 256;

/// Why a string cannot be an id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// It is empty.
    #[error("the id is empty")]
    Empty,
    /// It is longer than [`MAX_ID_LEN`].
    #[error("the id is {len} characters long (at most {MAX_ID_LEN})")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// It has a character no id has.
    #[error("the id has the character {character:?} (ids are letters, digits, '_', '-', '.' and ':')")]
    Character {
        /// The first such character.
        character: char,
    },
}

/// Whether `id` can be an id: 1 to [`MAX_ID_LEN`] ASCII letters, digits, `_`, `-`, `.`, `:`.
pub fn check_id(id: &str) -> Result<(), IdError> {
    if id.is_empty() {
        return Err(IdError::Empty);
    }
    if id.len() > MAX_ID_LEN {
        return Err(IdError::TooLong { len: id.len() });
    }
    match id.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))) {
        Some(character) => Err(IdError::Character { character }),
        None => Ok(()),
    }
}

/// `id`, checked, or the backend error an affinity map answers for one that cannot be an id
/// (`BackendError::InvalidKey`, naming the id cut short): what every `AffinityMap` refuses.
pub fn checked_key(id: &str) -> Result<&str, crate::ports::BackendError> {
    check_id(id).map(|()| id).map_err(|e| crate::ports::BackendError::InvalidKey {
        key: format!("affinity {:?}", id.chars().take(64).collect::<String>()),
        detail: e.to_string(),
    })
}

/// An id a request refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference<'a> {
    /// The id.
    pub id: &'a str,
    /// The request field that names it (`previous_response_id`, `conversation`,
    /// `input_file_id`, `file_id`).
    pub field: &'static str,
    /// The state must be found: a request continuing a response or a conversation the gateway
    /// does not know cannot be routed (OpenAI answers such a request 400
    /// `previous_response_not_found`). A file the gateway did not see uploaded may have been
    /// uploaded to the provider directly: the call goes as it would without it.
    pub required: bool,
}

/// At most this many file ids are read of one request.
const MAX_FILE_IDS: usize = 64;

/// The files a list of messages or input items names, at most [`MAX_FILE_IDS`]: each item's
/// content parts with a `file_id` (a Responses `input_file` or `input_image`) or a
/// `file.file_id` (chat's `file` part). Only those places are read: a call's body is not walked.
fn file_ids<'a>(items: &'a Value, out: &mut Vec<Reference<'a>>) {
    let parts = items.as_array().into_iter().flatten().filter_map(|item| item.get("content").and_then(Value::as_array)).flatten();
    for part in parts {
        let named = part.get("file_id").or_else(|| part.get("file").and_then(|file| file.get("file_id")));
        if let Some(Value::String(id)) = named {
            if out.len() == MAX_FILE_IDS {
                return;
            }
            out.push(Reference { id, field: "file_id", required: false });
        }
    }
}

/// The ids of kept state `request` refers to: a Responses call's `previous_response_id` and
/// `conversation` (required) and the files its input names; a chat call's files; a batch's
/// input file. A request to a stored object's route is pinned by its route instead.
pub fn references(request: &Request) -> Vec<Reference<'_>> {
    let mut refs = Vec::new();
    if request.target().is_some() {
        return refs;
    }
    let body = request.body();
    match request.kind() {
        Kind::Responses => {
            if let Some(id) = body.get("previous_response_id").and_then(Value::as_str) {
                refs.push(Reference { id, field: "previous_response_id", required: true });
            }
            if let Some(id) = body.get("conversation").and_then(crate::responses::conversation_id) {
                refs.push(Reference { id, field: "conversation", required: true });
            }
            if let Some(input) = body.get("input") {
                file_ids(input, &mut refs);
            }
        }
        Kind::Chat => {
            if let Some(messages) = body.get("messages") {
                file_ids(messages, &mut refs);
            }
        }
        Kind::Batches => {
            if let Some(id) = body.get("input_file_id").and_then(Value::as_str) {
                refs.push(Reference { id, field: "input_file_id", required: false });
            }
        }
        _ => {}
    }
    refs
}

/// The ids of state the provider keeps for `response`, the answer to `request`: a stored
/// response (unless the request said `store: false`) and its conversation; an uploaded file; a
/// batch and the files it writes (its output and error files, once it has them).
pub fn kept_ids<'a>(request: &Request, response: &'a Response) -> Vec<&'a str> {
    let body = response.body();
    let string = |field: &str| body.get(field).and_then(Value::as_str);
    match request.kind() {
        Kind::Responses if request.target().is_none() => {
            let stored = request.body().get("store").and_then(Value::as_bool).unwrap_or(true);
            crate::responses::kept_ids(body, stored)
        }
        Kind::Files if request.target().is_none() => string("id").into_iter().collect(),
        Kind::Batches => ["id", "output_file_id", "error_file_id"].iter().filter_map(|f| string(f)).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{Method, Object, Target};
    use serde_json::json;

    fn object(value: Value) -> Object {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn what_an_id_may_be() {
        assert_eq!(check_id("resp_68a1b2-c.3:x"), Ok(()));
        assert_eq!(check_id(""), Err(IdError::Empty));
        assert_eq!(check_id(&"a".repeat(10_000)), Err(IdError::TooLong { len: 10_000 }));
        assert_eq!(check_id("resp/../x"), Err(IdError::Character { character: '/' }));
        assert_eq!(check_id("résumé"), Err(IdError::Character { character: 'é' }));
        assert_eq!(IdError::TooLong { len: 300 }.to_string(), "the id is 300 characters long (at most 256)");
    }

    #[test]
    fn what_a_request_refers_to() {
        let turn = Request::native(
            Kind::Responses,
            object(json!({
                "previous_response_id": "resp_1",
                "conversation": {"id": "conv_1"},
                "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}, {"type": "input_text", "text": "hi"}]}]
            })),
        );
        let refs: Vec<(&str, &str, bool)> = references(&turn).iter().map(|r| (r.id, r.field, r.required)).collect();
        assert_eq!(refs, [("resp_1", "previous_response_id", true), ("conv_1", "conversation", true), ("file-1", "file_id", false)]);
        let batch = Request::native(Kind::Batches, object(json!({"input_file_id": "file-2", "endpoint": "/v1/chat/completions"})));
        assert_eq!(references(&batch).iter().map(|r| r.id).collect::<Vec<_>>(), ["file-2"]);
        let routed = Request::to_target(Kind::Responses, Target::new(Method::Get, "responses/resp_1"));
        assert!(references(&routed).is_empty(), "a route is pinned by its id, not its body");
        let part = |i: u32| json!({"role": "user", "content": [{"type": "file", "file": {"file_id": format!("f{i}")}}]});
        let many = Request::native(Kind::Chat, object(json!({"messages": (0..100).map(part).collect::<Vec<_>>()})));
        assert_eq!(references(&many).len(), MAX_FILE_IDS, "chat's file parts, at most MAX_FILE_IDS");
        let elsewhere =
            Request::native(Kind::Chat, object(json!({"messages": [{"role": "user", "content": "hi"}], "metadata": {"file_id": "f"}})));
        assert!(references(&elsewhere).is_empty(), "only content parts name files");
    }

    #[test]
    fn what_an_answer_keeps() {
        let created = Response::new(Kind::Responses, object(json!({"id": "resp_2", "conversation": "conv_2"})));
        let ask = |store: Value| Request::native(Kind::Responses, object(json!({"input": "hi", "store": store})));
        assert_eq!(kept_ids(&ask(json!(true)), &created), ["resp_2", "conv_2"]);
        assert_eq!(kept_ids(&ask(json!(false)), &created), ["conv_2"]);
        let retrieve = Request::to_target(Kind::Responses, Target::new(Method::Get, "responses/resp_2"));
        assert!(kept_ids(&retrieve, &created).is_empty());
        let batch = Response::new(Kind::Batches, object(json!({"id": "batch_1", "output_file_id": "file-9", "error_file_id": null})));
        let poll = Request::to_target(Kind::Batches, Target::new(Method::Get, "batches/batch_1"));
        assert_eq!(kept_ids(&poll, &batch), ["batch_1", "file-9"]);
    }
}
