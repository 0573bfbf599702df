//! How an attempt's request reaches the source. A JSON call (every kind but a multipart form and
//! a stored object's route) goes out on the source's own pooled client from hyper-util: one
//! connection pool per source, keep-alive connections held 90 s, HTTP/2 where the provider
//! offers it by ALPN, TLS by rustls with webpki's roots. The rest, and every request of a source
//! that the environment sends through a proxy (`HTTPS_PROXY`, `ALL_PROXY`, … with `NO_PROXY`,
//! as reqwest reads them), goes through reqwest, which brings the proxy and the multipart body.
//!
//! Why two: on the hot path reqwest's layers (a redirect policy that parses each request's URL
//! twice, a retry layer that clones each request, its own request and URL types) cost ~15 µs of
//! CPU a request on this project's machine, about as much as the rest of the client; hyper-util's
//! client is what reqwest itself runs underneath. Either way the answer is handed on as a
//! `reqwest::Response`, so what reads it is one piece of code.

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue, USER_AGENT};
use std::sync::Arc;
use std::time::Duration;

/// How long an idle connection is kept for the next request.
const POOL_IDLE: Duration = Duration::from_secs(90);

/// The `user-agent` every attempt carries.
const AGENT: &str = concat!("llm-gateway/", env!("CARGO_PKG_VERSION"));

/// A source's own pooled client, for a source no proxy stands in front of.
pub(crate) struct Direct {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
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

impl Direct {
    /// A pooled client that gives up connecting after `connect_timeout`.
    pub(crate) fn new(connect_timeout: Duration) -> Result<Direct, String> {
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
        http.set_connect_timeout(Some(connect_timeout));
        let https = HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().enable_http2().wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(https);
        Ok(Direct { client })
    }

    /// POSTs `body` to `endpoint` with `headers` (the JSON content type, `accept` and
    /// `user-agent` added where absent, as reqwest adds them); how it failed, in
    /// [`crate::classify::classify_transport`]'s words.
    pub(crate) async fn post(&self, endpoint: &http::Uri, mut headers: HeaderMap, body: Bytes) -> Result<reqwest::Response, &'static str> {
        json_headers(&mut headers);
        let mut request = http::Request::new(Full::new(body));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = endpoint.clone();
        *request.headers_mut() = headers;
        match self.client.request(request).await {
            Ok(response) => Ok(reqwest::Response::from(response.map(reqwest::Body::wrap))),
            Err(e) => Err(failure(&e)),
        }
    }
}

/// How a request on the pooled client failed before its answer's headers: as reqwest says it
/// (a connect that timed out is a `timeout`, as there).
fn failure(error: &(dyn std::error::Error + 'static)) -> &'static str {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut) {
            return "timeout";
        }
        cause = e.source();
    }
    match error.downcast_ref::<hyper_util::client::legacy::Error>() {
        Some(e) if e.is_connect() => "connect",
        _ => "reset",
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
    async fn a_connection_refused_and_a_connect_timing_out_are_named_as_reqwest_names_them() {
        let direct = Direct::new(Duration::from_secs(5)).unwrap();
        // Port 9 (discard) is closed on the test machine's loopback.
        let refused = direct.post(&"http://127.0.0.1:9/v1".parse().unwrap(), HeaderMap::new(), Bytes::new()).await;
        assert_eq!(refused.err(), Some("connect"));
        assert_eq!(failure(&std::io::Error::new(std::io::ErrorKind::TimedOut, "connect")), "timeout");
        assert_eq!(failure(&std::io::Error::other("reset by peer")), "reset");
    }
}
