//! In-process `gateway_core::ports::Upstream`s, for tests of the call pipeline without sockets:
//! [`ScriptedUpstream`] answers each source by its plan (over tokio's clock, so a paused clock
//! drives it) and records which source every attempt went to; [`EchoUpstream`] answers every
//! attempt at once.

use async_trait::async_trait;
use gateway_core::outcome::OutcomeClass;
use gateway_core::ports::Upstream;
use gateway_core::request::{Attempt, Kind, Request, Response, Usage};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// What a source answers to its n-th attempt (0-based), and after how long.
pub type Plan = Box<dyn FnMut(u32) -> (Step, Duration) + Send>;

/// How one attempt ends.
#[derive(Clone, Debug)]
pub enum Step {
    /// A success: `ok from <source>` for chat, one vector of four 0.5s per input for embeddings.
    Ok,
    /// A failure of this class (detail `scripted_<class>`).
    Fail(OutcomeClass),
    /// A 429, with the provider's Retry-After if any.
    RateLimited(Option<Duration>),
}

/// The latency of the answers of [`always`](ScriptedUpstream::always), of
/// [`script`](ScriptedUpstream::script) and of a source without a plan.
const LATENCY: Duration = Duration::from_millis(50);

/// A provider per source name, answering by plan (an unplanned source answers `Ok` after 50 ms),
/// recording the source of every attempt in order.
#[derive(Default)]
pub struct ScriptedUpstream {
    plans: Mutex<HashMap<String, (Plan, u32)>>,
    sent: Mutex<Vec<String>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ScriptedUpstream {
    /// An upstream with no plans, shared.
    pub fn new() -> Arc<Self> {
        Arc::new(ScriptedUpstream::default())
    }

    /// `source` answers its n-th attempt with `plan(n)` (replacing its plan, counting from 0).
    pub fn plan(&self, source: &str, plan: impl FnMut(u32) -> (Step, Duration) + Send + 'static) {
        lock(&self.plans).insert(source.to_owned(), (Box::new(plan), 0));
    }

    /// Every attempt at `source` answers `step` after 50 ms.
    pub fn always(&self, source: &str, step: Step) {
        self.plan(source, move |_| (step.clone(), LATENCY));
    }

    /// `source` answers the steps in order after 50 ms each, then `Ok`.
    pub fn script(&self, source: &str, steps: Vec<Step>) {
        self.plan(source, move |n| (steps.get(n as usize).cloned().unwrap_or(Step::Ok), LATENCY));
    }

    /// The source of every attempt so far, in order.
    pub fn sent(&self) -> Vec<String> {
        lock(&self.sent).clone()
    }
}

#[async_trait]
impl Upstream for ScriptedUpstream {
    async fn send(&self, source: &str, request: &Request) -> Attempt {
        let (step, latency) = {
            let mut plans = lock(&self.plans);
            lock(&self.sent).push(source.to_owned());
            match plans.get_mut(source) {
                Some((plan, n)) => {
                    let answer = plan(*n);
                    *n += 1;
                    answer
                }
                None => (Step::Ok, LATENCY),
            }
        };
        crate::Timer::Tokio.wait(latency).await;
        let usage = Some(Usage { prompt_tokens: 10, completion_tokens: 5 });
        match step {
            Step::Ok => match request.kind() {
                Kind::Embeddings => {
                    Attempt::success(Response::embedding_vectors(&vec![vec![0.5; 4]; request.texts().count()], usage), "http_200")
                }
                kind => Attempt::success(text_answer(kind, &format!("ok from {source}"), usage), "http_200"),
            },
            Step::Fail(class) => Attempt::failure(class, format!("scripted_{class}"), None),
            Step::RateLimited(retry_after) => Attempt::failure(OutcomeClass::RateLimited, "http_429", retry_after),
        }
    }
}

/// An upstream that answers every attempt at once: an echo of the last message for chat (as a
/// JSON object when the request asks for structured output), three numbers per input for
/// embeddings.
#[derive(Clone, Copy, Debug, Default)]
pub struct EchoUpstream;

#[async_trait]
impl Upstream for EchoUpstream {
    async fn send(&self, _source: &str, request: &Request) -> Attempt {
        let last = request.texts().last().unwrap_or("");
        let response = match request.kind() {
            // A request for structured output gets JSON (a prose echo would fail it and be re-asked).
            kind if request.structured.is_some() => text_answer(kind, &serde_json::json!({"echo": last}).to_string(), None),
            Kind::Embeddings => Response::embedding_vectors(&vec![vec![0.5, -1.0, 2.0]; request.texts().count().max(1)], None),
            kind => text_answer(kind, &format!("echo: {last}"), None),
        };
        Attempt::success(response, "http_200")
    }
}

/// A usable answer of `kind` saying `text` (images, speech, files and the like: a small
/// answer of their shape).
pub fn text_answer(kind: Kind, text: &str, usage: Option<Usage>) -> Response {
    use serde_json::json;
    let object = |value: serde_json::Value| value.as_object().cloned().unwrap_or_default();
    match kind {
        Kind::Chat | Kind::Embeddings => Response::chat_text(text, usage),
        Kind::Responses => Response::responses_text("resp_mock", text, usage),
        Kind::Completions => Response::new(
            kind,
            object(json!({"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": "stop"}]})),
        ),
        Kind::Moderations => Response::new(kind, object(json!({"id": "modr-mock", "results": [{"flagged": false}]}))),
        Kind::Images | Kind::ImageEdits => Response::new(kind, object(json!({"created": 1, "data": [{"b64_json": "aGk="}]}))),
        Kind::Transcriptions | Kind::Translations => Response::new(kind, object(json!({"text": text}))),
        Kind::Speech => {
            Response::raw(kind, gateway_core::request::Raw { content_type: "audio/mpeg".into(), bytes: text.as_bytes().to_vec().into() })
        }
        Kind::Files => Response::new(kind, object(json!({"id": "file-mock", "object": "file"}))),
        Kind::Batches => Response::new(kind, object(json!({"id": "batch_mock", "object": "batch", "status": "validating"}))),
        Kind::Messages => Response::message_text("msg_mock", text, usage),
        Kind::CountTokens => Response::new(kind, object(json!({"input_tokens": usage.map_or(1, |u| u.prompt_tokens)}))),
    }
}
