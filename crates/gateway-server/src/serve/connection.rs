//! One connection: HTTP/1.1 on hyper under its watch, the response body that keeps its request
//! counted, and the socket that tells the watch of its reads and writes.

use super::Limits;
use super::accept::Open;
use super::watch::{Busy, Watch};
use super::when_woken::WhenWoken;
use axum::Router;
use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// One connection: HTTP/1.1 until the client closes it, it times out or is asked to close
/// (made room for), `stop` (then hyper finishes the request in flight and closes) or `kill`.
pub(super) async fn connection(
    stream: TcpStream,
    router: Router,
    limits: Limits,
    stop: CancellationToken,
    kill: CancellationToken,
    open: &Open,
) {
    // A streamed chunk goes out when it is written: without this, Nagle holds a small chunk that
    // follows the response head until the client's delayed ACK (40 ms on Linux).
    let _ = stream.set_nodelay(true);
    let watch = Arc::new(Watch::new());
    let id = open.add(watch.clone());
    let io = TokioIo::new(Watched { inner: stream, watch: watch.clone() });
    let requests = watch.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let busy = requests.begin();
        let router = router.clone();
        async move {
            let response = router.oneshot(request.map(Body::new)).await?;
            Ok::<_, std::convert::Infallible>(response.map(|body| Guarded { body, _busy: busy }))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The watch times headers from the first byte, so idle connections may wait longer; a head
    // (with its read buffer) is held to 64 KiB.
    builder.header_read_timeout(None).keep_alive(true).max_buf_size(64 << 10);
    let mut conn = std::pin::pin!(builder.serve_connection(io, service));
    let mut draining = false;
    loop {
        // What rarely happens is polled when it wakes the task, not at each of a request's.
        let mut ending = std::pin::pin!(WhenWoken::new(ending(&stop, draining, &watch, limits, &kill)));
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!("connection ended: {e}");
                }
                break;
            }
            end = ending.as_mut() => match end {
                Ending::Stop => {
                    draining = true;
                    conn.as_mut().graceful_shutdown();
                }
                Ending::Expired(why) => {
                    tracing::debug!("closing a connection: {why}");
                    break;
                }
                Ending::Evicted => {
                    tracing::debug!("closing the connection idle the longest: the connection cap is reached");
                    break;
                }
                Ending::Kill => break,
            },
        }
    }
    open.remove(id);
}

/// Why a connection's task stops waiting on the connection alone.
enum Ending {
    /// Serving stops: hyper finishes the request in flight and closes.
    Stop,
    /// A deadline of the watch passed (why).
    Expired(&'static str),
    /// The connection cap needs this connection's place.
    Evicted,
    /// The connections still open at the shutdown deadline are dropped.
    Kill,
}

/// Resolves when the connection must end otherwise than by itself (`stop` only while not
/// `draining` already).
async fn ending(stop: &CancellationToken, draining: bool, watch: &Watch, limits: Limits, kill: &CancellationToken) -> Ending {
    tokio::select! {
        () = stop.cancelled(), if !draining => Ending::Stop,
        why = watch.expired(limits) => Ending::Expired(why),
        () = watch.close.cancelled() => Ending::Evicted,
        () = kill.cancelled() => Ending::Kill,
    }
}

/// A response body that keeps its request counted as busy until it is sent or dropped.
struct Guarded {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket, telling the watch when bytes arrive.
struct Watched {
    inner: TcpStream,
    watch: Arc<Watch>,
}

impl AsyncRead for Watched {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.watch.bytes_arrived();
        }
        polled
    }
}

impl Watched {
    /// Tells the watch whether a write went out or waits on the client.
    fn note_write<T>(&self, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match &polled {
            Poll::Pending => self.watch.write_waits(),
            Poll::Ready(_) => self.watch.wrote(),
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.note_write(polled)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.note_write(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
