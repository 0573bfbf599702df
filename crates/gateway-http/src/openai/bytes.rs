//! A binary answer (speech audio) read as it comes: each piece of the body a chunk of bytes
//! (`gateway_core::stream::bytes`), under the same bounds as an SSE stream — the watchdog
//! before the first piece and between pieces, the source's deadline, the stream's cap
//! (`max_stream_bytes`) and its read pace. Nothing is held past the piece in hand: the caller
//! relays each one.

use super::{Head, transient};
use crate::pace::Pace;
use crate::{HttpLimits, Source};
use async_trait::async_trait;
use gateway_core::ports::ChunkSource;
use gateway_core::request::{Outcome, RateSignal};
use gateway_core::stream::Chunk;
use std::time::Duration;
use tokio::time::Instant;

/// The pieces of a binary answer's body.
pub(super) struct BytesStream {
    response: reqwest::Response,
    content_type: String,
    watchdog: Option<Duration>,
    deadline: Instant,
    /// Where the watchdog's wait began: the attempt's start, then the last piece.
    watch_from: Instant,
    pace: Pace,
    streamed: u64,
    max_stream: u64,
    head: Head,
    done: bool,
}

impl BytesStream {
    /// Reads the body of `response`, an attempt at `src` that started at `started` and must
    /// end by `deadline`.
    pub(super) fn new(
        response: reqwest::Response,
        src: &Source,
        limits: &HttpLimits,
        (started, deadline): (Instant, Instant),
        head: Head,
    ) -> Self {
        let content_type =
            response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("application/octet-stream").to_owned();
        BytesStream {
            response,
            content_type,
            watchdog: src.watchdog,
            deadline,
            watch_from: started,
            pace: Pace::new(limits.max_stream_bytes_per_s, started),
            streamed: 0,
            max_stream: src.max_stream_bytes.unwrap_or(limits.max_stream_bytes),
            head,
            done: false,
        }
    }
}

/// Until when the next read of a body may wait, and what a read cut there is called: the
/// watchdog from `watch_from`, when it comes before the deadline, else the deadline.
pub(super) fn read_bound(watchdog: Option<Duration>, watch_from: Instant, deadline: Instant) -> (Instant, &'static str) {
    match watchdog {
        Some(limit) if watch_from + limit < deadline => (watch_from + limit, "watchdog"),
        _ => (deadline, "timeout"),
    }
}

/// The next piece of `response`'s body (`None` at its end), read at `pace` and by `until`: past
/// it the read is cut, `Transient(cause)`; a connection that breaks is `truncated_stream`.
pub(super) async fn next_piece(
    response: &mut reqwest::Response,
    pace: &mut Pace,
    (until, cause): (Instant, &'static str),
) -> Result<Option<bytes::Bytes>, Outcome> {
    let now = Instant::now();
    let ready = pace.ready_at(now);
    if ready > until {
        tokio::time::sleep_until(until).await;
        return Err(transient(cause));
    }
    // Only a body past its pace waits: any sleep, even to now, waits for tokio's 1 ms tick.
    if ready > now {
        tokio::time::sleep_until(ready).await;
    }
    match tokio::time::timeout_at(until, response.chunk()).await {
        Err(_) => Err(transient(cause)),
        Ok(Ok(Some(piece))) => {
            pace.spend(piece.len(), Instant::now());
            Ok(Some(piece))
        }
        Ok(Ok(None)) => Ok(None),
        Ok(Err(_)) => Err(transient("truncated_stream")),
    }
}

#[async_trait]
impl ChunkSource for BytesStream {
    async fn next_chunk(&mut self) -> Option<Result<Chunk, Outcome>> {
        if self.done {
            return None;
        }
        let bound = read_bound(self.watchdog, self.watch_from, self.deadline);
        match next_piece(&mut self.response, &mut self.pace, bound).await {
            Ok(Some(piece)) => {
                self.watch_from = Instant::now();
                self.streamed += piece.len() as u64;
                if self.streamed > self.max_stream {
                    self.done = true;
                    return Some(Err(Outcome::too_large("stream_too_large")));
                }
                Some(Ok(gateway_core::stream::bytes::chunk(&self.content_type, &piece)))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(outcome) => {
                self.done = true;
                Some(Err(outcome))
            }
        }
    }

    fn request_id(&self) -> Option<&str> {
        self.head.request_id.as_deref()
    }

    fn rate(&self) -> Option<RateSignal> {
        self.head.rate
    }
}
