//! `gateway-mock`: the workspace's one mock OpenAI provider, for tests, benchmarks and the soak's
//! HTTP transport.
//!
//! Over HTTP, a [`MockServer`] serves a [`Responder`] on a free port of 127.0.0.1 and records
//! every request it receives ([`Received`]: method, path, headers, the raw and the JSON body)
//! in a [`Recording`] the test asserts on. A responder decides each request's [`Answer`] at
//! once; the server then plays it (a zero delay anywhere waits for no timer):
//!
//! - status, headers and a whole body ([`Answer::json`], [`Answer::json_text`], [`Answer::new`]
//!   with [`Answer::body`], [`Answer::header`]);
//! - a delay before the head ([`Answer::after`]) and a [`Gate`] it waits at until the test
//!   releases it ([`Answer::gated`], [`Gate::release_one`], [`Gate::release_all`]);
//! - an SSE stream of [`Frame`]s: data, pauses, holds at a gate, a cut that breaks the
//!   connection mid-way ([`Answer::sse`], or [`Answer::sse_stream`] for frames made as they go);
//! - silence: the request is read and never answered ([`Answer::hang`]);
//! - a value kept alive while the answer is served ([`Answer::holding`]: an account's slot).
//!
//! Delays are waited out on tokio's timer, which follows a paused clock; a server built with
//! [`Builder::timer`]`(`[`Timer::Precise`]`)` waits them out to a tenth of a millisecond of real
//! time instead (a soak in real time at a small time scale).
//!
//! [`answering`] (or [`MockServer::answering`]) makes a closure a responder. [`Script`] answers
//! from queues per route (path prefix), in order, with a fallback; [`Echo`] answers as OpenAI
//! does, echoing the last message, with markers for errors, tools, refusals, cut, slow and gated
//! streams; [`Surface`] is the rest of OpenAI's API as a stateful provider (the Responses API
//! with stored responses and background ones, legacy completions, moderations, images, audio,
//! files and batches), one account per path prefix. [`Claude`] answers as Anthropic's Messages
//! API does (whole or streamed, and `count_tokens`), with markers like [`Echo`]'s. [`source_url`]
//! and [`MockServer::source_url`] name a source served under its own path (`/{source}/v1`), as
//! the soak serves its simulated providers (gateway-sim implements `Responder` for them).
//! [`Blackhole`] is lower still: it accepts TCP connections and never reads them. [`openai`] has
//! the bodies a hand-written answer needs.
//!
//! In process, [`ScriptedUpstream`] is a `gateway_core::ports::Upstream` answering each source by
//! its plan ([`Step`]s after delays, on tokio's clock) and recording the source of every attempt;
//! [`EchoUpstream`] answers every attempt at once.
//!
//! **Architecture Invariant:** gateway-mock depends on gateway-core's ports and on no other
//! gateway crate; the crates it stands in for are tested with it, never the other way round.

mod answer;
mod blackhole;
mod claude;
mod echo;
mod gate;
pub mod openai;
mod recording;
mod responder;
mod server;
mod surface;
mod timer;
mod upstream;

pub use answer::{Answer, Frame};
pub use blackhole::Blackhole;
pub use claude::Claude;
pub use echo::Echo;
pub use gate::Gate;
pub use recording::{FormPart, Received, Recording};
pub use responder::{Responder, Script, answering};
pub use server::{Builder, MockServer, source_url};
pub use surface::Surface;
pub use surface::media::speech_bytes;
pub use timer::Timer;
pub use upstream::{EchoUpstream, Plan, ScriptedUpstream, Step, text_answer};

/// `HeaderMap` of [`Received::headers`].
pub use axum::http::HeaderMap;
