//! A streamed answer (chat, Responses, legacy completions). The call runs first: one that fails
//! before its commit point within `keepalive_s` is answered with its status, as OpenAI answers
//! a stream it cannot start (so an SDK raises `RateLimitError`, `BadRequestError`… and its
//! retries see the status). One that commits is answered `text/event-stream` with who serves it
//! (`x-gateway-source`, `x-gateway-attempts`, the provider's `x-request-id`). One that needs
//! longer (a quota or breaker wait) is answered at `keepalive_s` with keep-alive comments until
//! its commit point; its failure then can only be an error event. After the commit point, each
//! chunk as an event in its dialect's framing ([`Framing`]) as it arrives (and a keep-alive
//! comment whenever `keepalive_s` passes without one), then the dialect's end; a failure is an
//! error event and the stream closes without a clean end. The call runs inside the body, so a
//! dropped connection drops the call.

use super::{Served, ServedHeaders, cut, governed};
use crate::AppState;
use crate::openai::{self, ApiError, Framing};
use axum::body::Body;
use axum::http::HeaderValue;
use axum::response::Response;
use gateway_client::ChatStream;
use gateway_core::request::Request;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// Where a streamed answer is.
enum Relay {
    /// The call runs (up to its commit point): keep-alive comments meanwhile.
    Calling(Pin<Box<dyn Future<Output = Result<ChatStream, ApiError>> + Send>>),
    /// Past the commit point: each chunk as it comes.
    Streaming(ChatStream),
    Done,
}

/// The streamed answer of `request` in `scope` (in `tenant`'s partition, if given), written in
/// `framing` (see the module doc).
pub(crate) async fn sse(
    state: Arc<AppState>,
    scope: String,
    tenant: Option<String>,
    request: Request,
    framing: Framing,
) -> Result<Response, ApiError> {
    let keepalive = Duration::from_secs_f64(state.config.keepalive_s);
    let mut calling = start_stream(state.clone(), scope.clone(), tenant, request);
    let (relay, served) = match tokio::time::timeout(keepalive, &mut calling).await {
        Ok(Ok(stream)) => {
            let served = Served { source: Some(stream.source()), attempts: stream.attempts(), request_id: stream.request_id() };
            let served = ServedHeaders::of(&scope, Some(served));
            (Relay::Streaming(stream), served)
        }
        Ok(Err(error)) => return Err(error),
        Err(_) => (Relay::Calling(calling), ServedHeaders::of(&scope, None)),
    };
    let body = futures_util::stream::unfold((relay, framing), move |(relay, framing)| {
        let state = state.clone();
        async move { next_event(relay, framing, &state, keepalive).await }
    });
    Ok(event_stream(Body::from_stream(body), served))
}

/// Starts the streamed call of `request` on `scope` (in `tenant`'s partition, if given), under
/// the shutdown cut.
fn start_stream(
    state: Arc<AppState>,
    scope: String,
    tenant: Option<String>,
    request: Request,
) -> Pin<Box<dyn Future<Output = Result<ChatStream, ApiError>> + Send>> {
    Box::pin(async move {
        governed(&state, async {
            match tenant.as_deref() {
                Some(tenant) => state.client.stream_as(&scope, tenant, &request).await,
                None => state.client.stream(&scope, &request).await,
            }
        })
        .await
    })
}

type Event = Option<(Result<String, Infallible>, (Relay, Framing))>;

/// The next SSE event of a streamed answer and where the relay is after it (`None`: the body
/// ends): keep-alive comments until the commit point, then each chunk, the dialect's end or an
/// error event, with a keep-alive comment whenever `keepalive` passes without one.
async fn next_event(mut relay: Relay, mut framing: Framing, state: &AppState, keepalive: Duration) -> Event {
    loop {
        relay = match relay {
            Relay::Done => return None,
            Relay::Calling(mut call) => tokio::select! {
                result = &mut call => match result {
                    Ok(stream) => Relay::Streaming(stream),
                    Err(error) => return Some((Ok(framing.error(&error)), (Relay::Done, framing))),
                },
                () = tokio::time::sleep(keepalive) => return Some((Ok(": keep-alive\n\n".to_owned()), (Relay::Calling(call), framing))),
            },
            Relay::Streaming(mut stream) => tokio::select! {
                next = stream.next() => match next {
                    Some(Ok(chunk)) => match framing.event(chunk) {
                        Some(event) => return Some((Ok(event), (Relay::Streaming(stream), framing))),
                        None => Relay::Streaming(stream),
                    },
                    Some(Err(broken)) => {
                        let error = openai::stream_broken(&broken, state.http().as_deref());
                        return Some((Ok(framing.error(&error)), (Relay::Done, framing)));
                    }
                    None => return framing.end().map(|end| (Ok(end.to_owned()), (Relay::Done, framing))),
                },
                () = state.cut.cancelled() => return Some((Ok(framing.error(&cut(state))), (Relay::Done, framing))),
                // A provider that pauses mid-answer (a long tool call, a reasoning model) leaves
                // the connection idle: a comment keeps every proxy on the path from timing it out.
                // (The stream's next chunk is read from a channel: dropping the read loses none.)
                () = tokio::time::sleep(keepalive) => return Some((Ok(": keep-alive\n\n".to_owned()), (Relay::Streaming(stream), framing))),
            },
        };
    }
}

/// The `text/event-stream` answer of `body`, with who serves it (only the scope while the call
/// has not committed).
fn event_stream(body: Body, served: ServedHeaders) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("text/event-stream"));
    headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    served.insert_into(headers);
    response
}
