//! How an attempt's request reaches the source. A JSON call (every kind but a multipart form and
//! a stored object's route) goes out on the source's own pooled client from hyper-util: one
//! connection pool per source, keep-alive connections held 90 s, HTTP/2 where the provider
//! offers it by ALPN, TLS by rustls with webpki's roots. The rest, and every request of a source
//! that the environment sends through a proxy (`HTTPS_PROXY`, `ALL_PROXY`, … with `NO_PROXY`,
//! as reqwest reads them) or whose URL carries a user and password, goes through reqwest, which
//! brings the proxy, basic authentication and the multipart body.
//!
//! Why two: on the hot path reqwest's layers (a redirect policy that parses each request's URL
//! twice, a retry layer that clones each request, its own request and URL types) cost ~15 µs of
//! CPU a request on this project's machine, about as much as the rest of the client; hyper-util's
//! client is what reqwest itself runs underneath. What those layers do that a caller would miss
//! is kept here: one bound on a connection's whole setup, TCP keepalive, a request the provider
//! refused unread sent again, and a redirect handed to reqwest to follow. Either way the answer
//! is handed on as a `reqwest::Response`, so what reads it is one piece of code.

use crate::classify::error_chain;
use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HOST, HeaderMap, HeaderValue, LOCATION, USER_AGENT};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// How long an idle connection is kept for the next request.
const POOL_IDLE: Duration = Duration::from_secs(90);

/// The `user-agent` every attempt carries.
const AGENT: &str = concat!("llm-gateway/", env!("CARGO_PKG_VERSION"));

/// The URL a `reqwest::Response` made from a pooled answer names: reqwest's own stand-in
/// (nothing here reads it), parsed once. Without it reqwest parses the stand-in for every answer,
/// IDNA included (~2 % of a proxied request's CPU in the proxy bench's profile).
static NO_URL: std::sync::LazyLock<http::Extensions> = std::sync::LazyLock::new(|| {
    use reqwest::ResponseBuilderExt;
    #[allow(clippy::unwrap_used)] // a constant URL and an empty answer
    let answer = http::Response::builder().url(reqwest::Url::parse("http://no.url.provided.local").unwrap()).body(()).unwrap();
    answer.into_parts().0.extensions
});

/// A source's own pooled client, for a source no proxy stands in front of.
pub(crate) struct Direct {
    client: Client<Bounded, Full<Bytes>>,
    /// A plain-HTTP source's authority and the `Host` its requests carry, written once: its
    /// connections are HTTP/1 (no TLS, so no ALPN to offer HTTP/2), where hyper-util would
    /// `format!` the header for every request (~2.5 k instructions of a proxied call in the
    /// proxy bench's profile). Over TLS hyper-util writes it, for the connections that are
    /// HTTP/1 only (HTTP/2 names the host in `:authority`).
    host: Option<(http::uri::Authority, HeaderValue)>,
}

/// Whether a source at `base_url` is sent to [`Direct`]ly: not when `proxies` (the
/// environment's proxy settings) send it through a proxy, nor when the URL carries a user and
/// password (reqwest sends them as basic authentication).
pub(crate) fn is_direct(base_url: &reqwest::Url, proxies: &Matcher) -> Result<bool, String> {
    if !base_url.username().is_empty() || base_url.password().is_some() {
        return Ok(false);
    }
    Ok(proxies.intercept(&uri(base_url)?).is_none())
}

/// `url` (reqwest's, already normalized: percent-encoded) as hyper's URI.
pub(crate) fn uri(url: &reqwest::Url) -> Result<http::Uri, String> {
    url.as_str().parse::<http::Uri>().map_err(|e| format!("{:?} is not a URI ({e})", url.as_str()))
}

/// The reqwest client of a source: what is not sent [`Direct`]ly.
pub(crate) fn reqwest_client(connect_timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder().connect_timeout(connect_timeout).pool_idle_timeout(POOL_IDLE).user_agent(AGENT).build()
}

/// Every connection's TCP keepalive: idle time before the first probe, then between probes,
/// and the probes unanswered before the connection is dropped (reqwest's defaults).
const KEEPALIVE: (Duration, Duration, u32) = (Duration::from_secs(15), Duration::from_secs(15), 3);

/// How long data sent may go unacknowledged before the kernel drops the connection (Linux's
/// `TCP_USER_TIMEOUT`, as reqwest sets it).
const USER_TIMEOUT: Duration = Duration::from_secs(30);

/// How many times a request the provider refused before reading it (HTTP/2's graceful
/// `GOAWAY`, `REFUSED_STREAM`) is sent again on a fresh stream, as reqwest does.
const NACK_RETRIES: usize = 2;

impl Direct {
    /// The pooled client of the source at `base` that gives up setting a connection up
    /// (resolving, connecting and the TLS handshake together) after `connect_timeout`.
    pub(crate) fn new(connect_timeout: Duration, base: &http::Uri) -> Result<Direct, String> {
        let host = match (base.scheme_str(), base.authority()) {
            (Some("http"), Some(authority)) => host_header(base).map(|host| (authority.clone(), host)),
            _ => None,
        };
        Ok(Direct { host, ..Direct::built(connect_timeout, false)? })
    }

    /// One that speaks HTTP/2 alone, also without TLS (the tests' HTTP/2 provider).
    #[cfg(test)]
    fn http2_only(connect_timeout: Duration) -> Result<Direct, String> {
        Direct::built(connect_timeout, true)
    }

    fn built(connect_timeout: Duration, http2_only: bool) -> Result<Direct, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS ({e})"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_keepalive(Some(KEEPALIVE.0));
        http.set_keepalive_interval(Some(KEEPALIVE.1));
        http.set_keepalive_retries(Some(KEEPALIVE.2));
        #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
        http.set_tcp_user_timeout(Some(USER_TIMEOUT));
        // The pool's `ALPN` offers HTTP/2 and HTTP/1.1 (hyper-rustls sets it from these).
        let https = HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().enable_http2().wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .http2_only(http2_only)
            .build(Bounded { inner: https, timeout: connect_timeout });
        Ok(Direct { client, host: None })
    }

    /// POSTs `body` to `endpoint` with `headers` (the caller's JSON headers in place, see
    /// [`json_headers`]): the answer; `None` when it redirects (reqwest follows redirects, with
    /// its policy for who sees the key on the way); or the error of a request that got no
    /// response (classified by [`crate::classify::classify_pooled_transport`]).
    pub(crate) async fn post(
        &self,
        endpoint: &http::Uri,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Result<Option<reqwest::Response>, hyper_util::client::legacy::Error> {
        let mut refused = 0;
        loop {
            let mut request = http::Request::new(Full::new(body.clone()));
            *request.method_mut() = http::Method::POST;
            *request.uri_mut() = endpoint.clone();
            *request.headers_mut() = headers.clone();
            if let Some((authority, host)) = &self.host
                && endpoint.authority() == Some(authority)
            {
                // A `Host` of the source's own configuration is kept, as hyper-util keeps it.
                request.headers_mut().entry(HOST).or_insert_with(|| host.clone());
            }
            match self.client.request(request).await {
                Ok(response) if response.status().is_redirection() && response.headers().contains_key(LOCATION) => return Ok(None),
                Ok(mut response) => {
                    response.extensions_mut().extend(NO_URL.clone());
                    return Ok(Some(reqwest::Response::from(response.map(reqwest::Body::wrap))));
                }
                Err(e) if refused < NACK_RETRIES && unread(&e) => refused += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

/// The `Host` of a request to `uri` over HTTP/1, as hyper-util writes it: the host, and the port
/// unless it is HTTP's own (80).
fn host_header(uri: &http::Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let value = match uri.port_u16().filter(|port| *port != 80) {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    HeaderValue::from_str(&value).ok()
}

/// Whether the provider said it did not read the request: a graceful `GOAWAY` or a
/// `REFUSED_STREAM` from the provider's side (RFC 9113 § 8.7), safe to send again.
fn unread(error: &(dyn std::error::Error + 'static)) -> bool {
    error_chain(error).filter_map(|e| e.downcast_ref::<h2::Error>()).any(|h2| {
        h2.is_remote()
            && ((h2.is_go_away() && h2.reason() == Some(h2::Reason::NO_ERROR))
                || (h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM)))
    })
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The connector under one bound on the whole of a connection's setup, as reqwest's
/// `connect_timeout` bounds it (hyper-util's own bounds the TCP connect alone).
#[derive(Clone)]
struct Bounded {
    inner: HttpsConnector<HttpConnector>,
    timeout: Duration,
}

impl tower::Service<http::Uri> for Bounded {
    type Response = <HttpsConnector<HttpConnector> as tower::Service<http::Uri>>::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, dst: http::Uri) -> Self::Future {
        let connecting = self.inner.call(dst);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(connected) => connected,
                Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting took too long").into()),
            }
        })
    }
}

/// A JSON request's own headers, where the caller's and the source's set none.
pub(crate) fn json_headers(headers: &mut HeaderMap) {
    headers.entry(CONTENT_TYPE).or_insert(HeaderValue::from_static("application/json"));
    headers.entry(ACCEPT).or_insert(HeaderValue::from_static("*/*"));
    headers.entry(USER_AGENT).or_insert(HeaderValue::from_static(AGENT));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn url(s: &str) -> reqwest::Url {
        reqwest::Url::parse(s).unwrap()
    }

    #[test]
    fn a_source_behind_a_proxy_or_with_a_password_goes_through_reqwest() {
        let none = Matcher::builder().build();
        assert!(is_direct(&url("https://api.openai.com/v1"), &none).unwrap());
        assert!(!is_direct(&url("http://user:pw@127.0.0.1:8080/v1"), &none).unwrap(), "basic authentication");
        let proxied = Matcher::builder().all("http://proxy.internal:3128").no("127.0.0.1").build();
        assert!(!is_direct(&url("https://api.openai.com/v1"), &proxied).unwrap());
        assert!(is_direct(&url("http://127.0.0.1:8080/v1"), &proxied).unwrap(), "NO_PROXY");
    }

    #[test]
    fn a_url_is_a_uri_once_normalized() {
        // reqwest percent-encodes what `http::Uri` refuses.
        assert_eq!(uri(&url("http://x/a b")).unwrap().path(), "/a%20b");
    }

    #[tokio::test]
    async fn a_connection_refused_is_a_connect() {
        let endpoint = "http://127.0.0.1:9/v1".parse().unwrap();
        let direct = Direct::new(Duration::from_secs(5), &endpoint).unwrap();
        // Port 9 (discard) is closed on the test machine's loopback.
        let refused = direct.post(&endpoint, &HeaderMap::new(), &Bytes::new()).await;
        assert_eq!(detail(refused), Some("connect"));
    }

    #[tokio::test]
    async fn a_plain_http_request_carries_its_own_endpoints_host_once_unless_the_source_sets_one() {
        let answer = |_: &gateway_mock::Received| gateway_mock::Answer::json_text(200, "{}".to_owned());
        let (source, other) =
            (gateway_mock::MockServer::answering(answer).await.unwrap(), gateway_mock::MockServer::answering(answer).await.unwrap());
        let endpoint =
            |mock: &gateway_mock::MockServer| format!("http://{}/v1/chat/completions", mock.addr()).parse::<http::Uri>().unwrap();
        let direct = Direct::new(Duration::from_secs(5), &endpoint(&source)).unwrap();
        for mock in [&source, &other] {
            direct.post(&endpoint(mock), &HeaderMap::new(), &Bytes::from_static(b"{}")).await.unwrap().unwrap();
            let received = mock.received();
            let hosts: Vec<_> = received[0].headers.get_all(HOST).iter().collect();
            assert_eq!(hosts, [mock.addr().to_string().as_str()], "one Host, the endpoint's own");
        }
        let configured = HeaderMap::from_iter([(HOST, HeaderValue::from_static("relay.example"))]);
        direct.post(&endpoint(&source), &configured, &Bytes::from_static(b"{}")).await.unwrap().unwrap();
        assert_eq!(source.received()[1].headers.get_all(HOST).iter().collect::<Vec<_>>(), ["relay.example"], "the source's own Host");
        assert_eq!(host_header(&"http://example.com:80/v1".parse().unwrap()).unwrap(), "example.com", "HTTP's own port is not named");
    }

    /// How a post failed, as the adapter names it.
    fn detail(posted: Result<Option<reqwest::Response>, hyper_util::client::legacy::Error>) -> Option<&'static str> {
        posted.err().map(|e| crate::classify::classify_pooled_transport(&e).1)
    }

    #[tokio::test(start_paused = true)]
    async fn a_tls_handshake_that_never_ends_times_out_as_a_connect() {
        let silent = gateway_mock::Blackhole::start().await.unwrap();
        let endpoint = format!("https://{}/v1", silent.addr()).parse().unwrap();
        let direct = Direct::new(Duration::from_secs(10), &endpoint).unwrap();
        let posted = tokio::time::timeout(Duration::from_secs(60), direct.post(&endpoint, &HeaderMap::new(), &Bytes::new())).await;
        assert_eq!(posted.map(detail), Ok(Some("timeout")));
    }

    /// An HTTP/2 provider (without TLS) that refuses its first `refusals` requests unread and
    /// answers the rest; how many requests it received.
    async fn refusing(refusals: usize) -> (http::Uri, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("http://{}/v1/chat/completions", listener.local_addr().unwrap()).parse().unwrap();
        let received = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = received.clone();
        tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let mut connection = h2::server::handshake(socket).await.unwrap();
            while let Some(Ok((_, mut respond))) = connection.accept().await {
                if count.fetch_add(1, Ordering::SeqCst) < refusals {
                    respond.send_reset(h2::Reason::REFUSED_STREAM);
                    continue;
                }
                let head = http::Response::builder().status(200).body(()).unwrap();
                let mut body = respond.send_response(head, false).unwrap();
                body.send_data(Bytes::from_static(b"{}"), true).unwrap();
            }
        });
        (uri, received)
    }

    #[tokio::test]
    async fn a_request_the_provider_refused_unread_is_sent_again_twice_at_most() {
        use std::sync::atomic::Ordering;
        let direct = Direct::http2_only(Duration::from_secs(5)).unwrap();
        let (uri, received) = refusing(2).await;
        let answer = direct.post(&uri, &HeaderMap::new(), &Bytes::from_static(b"{}")).await.unwrap().unwrap();
        assert_eq!((answer.status().as_u16(), received.load(Ordering::SeqCst)), (200, 3));
        let (uri, received) = refusing(3).await;
        let refused = direct.post(&uri, &HeaderMap::new(), &Bytes::from_static(b"{}")).await;
        assert_eq!((detail(refused), received.load(Ordering::SeqCst)), (Some("reset"), 3));
    }

    #[test]
    fn only_what_the_provider_refused_unread_is_sent_again() {
        // Made here, not sent by the provider: not a refusal of the provider's.
        assert!(!unread(&h2::Error::from(h2::Reason::REFUSED_STREAM)));
        assert!(!unread(&std::io::Error::other(h2::Error::from(h2::Reason::NO_ERROR))));
        assert!(!unread(&std::io::Error::other("reset by peer")));
    }
}
