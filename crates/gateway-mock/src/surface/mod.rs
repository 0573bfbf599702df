//! [`Surface`]: the rest of OpenAI's API as a stateful provider, for the proxy's tests and the
//! SDK script: the Responses API with stored responses ([`responses`]: create, whole or
//! streamed, `previous_response_id` chains, retrieve, delete, input items, cancel, background
//! responses that finish as they are polled, a stream replayed from `starting_after`), legacy
//! completions, moderations, images, audio ([`media`]), files and batches ([`files`]).
//!
//! Each account is a path prefix: `/a/v1/responses` and `/b/v1/responses` are two providers that
//! share nothing, so a response made by `a` is unknown to `b` (404, or 400
//! `previous_response_not_found`), as on two real accounts. Ids carry the account's name
//! (`resp_a_1`, `file-a-2`, `batch_a_3`). Markers in the last input text ask for answers:
//! `TOOLS` a function call, `REFUSE` a refusal, `FAILED` a failed response, `INCOMPLETE` one cut
//! at `max_output_tokens`; a JSON `text.format` gets `{"answer": "echo"}`. Every answer carries
//! `x-request-id`. An account can be taken down (every request answered 503) with
//! [`Surface::set_down`], or by `POST /<account>/v1/__mock/down` (and `…/up`).

mod files;
pub(crate) mod media;
mod responses;

use crate::answer::Answer;
use crate::recording::Received;
use crate::responder::Responder;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// One account's stored state.
#[derive(Default)]
struct Account {
    /// The account answers every request 503 (its provider is down).
    down: bool,
    /// What every id it makes carries before its number (ids unique across runs).
    tag: String,
    responses: HashMap<String, responses::Stored>,
    files: HashMap<String, files::StoredFile>,
    batches: HashMap<String, files::StoredBatch>,
    /// Ids made so far (each id's number).
    made: u64,
}

/// The stateful persona (see the module doc).
#[derive(Default)]
pub struct Surface {
    accounts: Mutex<HashMap<String, Account>>,
    requests: std::sync::atomic::AtomicU64,
    tag: String,
}

impl Surface {
    /// A provider with no stored state.
    pub fn new() -> Surface {
        Surface::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Account>> {
        self.accounts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A provider whose ids carry `tag` before their number (`resp_a_<tag>1`): ids no other run
    /// made, for a test whose affinity map outlives it (Redis).
    pub fn tagged(tag: &str) -> Surface {
        Surface { tag: tag.to_owned(), ..Surface::default() }
    }

    /// The account `name`'s state, made at first use.
    fn account<'a>(&self, accounts: &'a mut HashMap<String, Account>, name: &str) -> &'a mut Account {
        accounts.entry(name.to_owned()).or_insert_with(|| Account { tag: self.tag.clone(), ..Account::default() })
    }

    /// Takes `account` down (every request answered 503) or brings it back up.
    pub fn set_down(&self, account: &str, down: bool) {
        let mut accounts = self.lock();
        self.account(&mut accounts, account).down = down;
    }

    /// How many stored responses `account` (its path prefix, without slashes) holds.
    pub fn stored_responses(&self, account: &str) -> usize {
        self.lock().get(account).map_or(0, |a| a.responses.len())
    }
}

impl Account {
    /// The next id of `kind` (`resp_`, `file-`, `batch_`) this account makes.
    fn next_id(&mut self, kind: &str, account: &str) -> String {
        self.made += 1;
        let sep = if kind.ends_with('-') { "-" } else { "_" };
        format!("{kind}{account}{sep}{}{}", self.tag, self.made)
    }
}

/// A request's account (the path before `/v1`, without slashes; `mock` at the root) and its
/// route below `/v1/`.
fn split(path: &str) -> Option<(String, &str)> {
    let at = path.find("/v1/")?;
    let account = path[..at].trim_matches('/');
    Some((if account.is_empty() { "mock".to_owned() } else { account.replace('/', "_") }, &path[at + 4..]))
}

/// OpenAI's error answer.
pub(crate) fn error(status: u16, message: &str, param: Option<&str>, code: Option<&str>) -> Answer {
    Answer::json(status, &json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}))
}

/// OpenAI's 404 for an id it does not hold.
pub(crate) fn not_found(noun: &str, id: &str) -> Answer {
    error(404, &format!("{noun} with id '{id}' not found."), None, None)
}

/// The text a request says last: a Responses `input` (a string, or its last item's text), a
/// chat message, a `prompt` or an `input` string.
pub(crate) fn said(request: &Received) -> String {
    let body = &request.body;
    let from_content = |content: &Value| match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(" "),
        _ => String::new(),
    };
    match &body["input"] {
        Value::String(text) => return text.clone(),
        Value::Array(items) if !items.is_empty() => {
            if let Some(last) = items.last() {
                if last["type"] == "function_call_output" {
                    return last["output"].as_str().unwrap_or_default().to_owned();
                }
                return from_content(&last["content"]);
            }
        }
        _ => {}
    }
    if let Some(prompt) = body["prompt"].as_str() {
        return prompt.to_owned();
    }
    request.last_text()
}

impl Surface {
    fn decide(&self, request: &Received) -> Answer {
        let Some((account, route)) = split(&request.path) else { return error(404, "no such route", None, None) };
        let mut accounts = self.lock();
        let state = self.account(&mut accounts, &account);
        let method = request.method.as_str();
        let segments: Vec<&str> = route.split('/').collect();
        // A test without the persona at hand (the SDK script) switches an account here.
        if let ("POST", ["__mock", switch @ ("down" | "up")]) = (method, segments.as_slice()) {
            state.down = *switch == "down";
            return Answer::json(200, &json!({"account": account, "down": state.down}));
        }
        if state.down {
            return Answer::json(
                503,
                &json!({"error": {"message": "The server is overloaded.", "type": "server_error", "param": null, "code": null}}),
            );
        }
        match (method, segments.as_slice()) {
            ("POST", ["responses"]) => responses::create(state, &account, request),
            ("GET", ["responses", id]) => responses::retrieve(state, id, &request.query),
            ("DELETE", ["responses", id]) => responses::delete(state, id),
            ("GET", ["responses", id, "input_items"]) => responses::input_items(state, id),
            ("POST", ["responses", id, "cancel"]) => responses::cancel(state, id),
            ("POST", ["completions"]) => media::completion(request),
            ("POST", ["moderations"]) => media::moderation(request),
            ("POST", ["images", "generations"]) => media::images(request),
            ("POST", ["images", "edits"]) => media::image_edits(request),
            ("POST", ["audio", "transcriptions"]) => media::transcript(request, "transcript"),
            ("POST", ["audio", "translations"]) => media::transcript(request, "translation"),
            ("POST", ["audio", "speech"]) => media::speech(request),
            ("POST", ["files"]) => files::upload(state, &account, request),
            ("GET", ["files", id]) => files::retrieve(state, id),
            ("GET", ["files", id, "content"]) => files::content(state, id),
            ("DELETE", ["files", id]) => files::delete(state, id),
            ("POST", ["batches"]) => files::create_batch(state, &account, request),
            ("GET", ["batches", id]) => files::retrieve_batch(state, &account, id),
            ("POST", ["batches", id, "cancel"]) => files::cancel_batch(state, id),
            _ => error(404, &format!("no route {method} /v1/{route}"), None, None),
        }
    }
}

impl Responder for Surface {
    fn answer(&self, request: &Received) -> Answer {
        let n = self.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.decide(request).header("x-request-id", format!("req-surface-{n}"))
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn the_account_is_the_path_before_v1() {
        assert_eq!(split("/a/v1/responses"), Some(("a".to_owned(), "responses")));
        assert_eq!(split("/v1/files/file-1/content"), Some(("mock".to_owned(), "files/file-1/content")));
        assert_eq!(split("/x/y/v1/batches"), Some(("x_y".to_owned(), "batches")));
        assert_eq!(split("/nothing"), None);
    }
}
