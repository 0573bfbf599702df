//! Who decides the answers: the [`Responder`] port, [`answering`] (a closure as a responder),
//! and [`Script`], queues of answers per route.

use crate::answer::Answer;
use crate::recording::Received;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

/// Decides what one request gets. Called once per request, after the request is read and
/// recorded; every wait, gate and stream of the answer is then played by the server, so the
/// decision itself is immediate.
pub trait Responder: Send + Sync + 'static {
    /// The answer to `request`.
    fn answer(&self, request: &Received) -> Answer;
}

/// A responder answering each request with `answer(request)`.
pub fn answering(answer: impl Fn(&Received) -> Answer + Send + Sync + 'static) -> impl Responder {
    Answering(answer)
}

struct Answering<F>(F);

impl<F: Fn(&Received) -> Answer + Send + Sync + 'static> Responder for Answering<F> {
    fn answer(&self, request: &Received) -> Answer {
        (self.0)(request)
    }
}

impl<R: Responder + ?Sized> Responder for Arc<R> {
    fn answer(&self, request: &Received) -> Answer {
        (**self).answer(request)
    }
}

impl<R: Responder + ?Sized> Responder for Box<R> {
    fn answer(&self, request: &Received) -> Answer {
        (**self).answer(request)
    }
}

fn _obj_safe(_: Box<dyn Responder>) {}

/// Answers in order, per route: a request takes the next answer of the first route whose path
/// prefix it matches and whose queue is not empty; a request with no queued answer left gets the
/// fallback (404 `not_scripted`, unless [`otherwise`](Script::otherwise) says another).
pub struct Script {
    routes: Mutex<Vec<(String, VecDeque<Answer>)>>,
    otherwise: Box<dyn Responder>,
}

impl Default for Script {
    fn default() -> Self {
        Script::new()
    }
}

impl Script {
    /// An empty script: every request gets 404.
    pub fn new() -> Script {
        let not_found = |request: &Received| {
            let error = serde_json::json!({"error": {"message": format!("nothing scripted for {} {}", request.method, request.path),
                                                     "type": "invalid_request_error", "code": "not_scripted"}});
            Answer::json(404, &error)
        };
        Script { routes: Mutex::new(Vec::new()), otherwise: Box::new(Answering(not_found)) }
    }

    /// Queues `answers` for requests whose path starts with `prefix` (after any queued before).
    pub fn route(self, prefix: &str, answers: impl IntoIterator<Item = Answer>) -> Script {
        {
            let mut routes = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
            match routes.iter_mut().find(|(p, _)| p == prefix) {
                Some((_, queue)) => queue.extend(answers),
                None => routes.push((prefix.to_owned(), answers.into_iter().collect())),
            }
        }
        self
    }

    /// Answers with `fallback` whatever the queues do not.
    pub fn otherwise(mut self, fallback: impl Responder) -> Script {
        self.otherwise = Box::new(fallback);
        self
    }

    /// How many queued answers are left for `prefix`.
    pub fn left(&self, prefix: &str) -> usize {
        let routes = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
        routes.iter().find(|(p, _)| p == prefix).map_or(0, |(_, queue)| queue.len())
    }
}

impl Responder for Script {
    fn answer(&self, request: &Received) -> Answer {
        let queued = {
            let mut routes = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
            routes
                .iter_mut()
                .find(|(prefix, queue)| request.path.starts_with(prefix.as_str()) && !queue.is_empty())
                .and_then(|(_, q)| q.pop_front())
        };
        queued.unwrap_or_else(|| self.otherwise.answer(request))
    }
}
