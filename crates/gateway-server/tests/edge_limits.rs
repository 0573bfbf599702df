//! The edge's smaller limits, each with the case that once broke it: a body that declares more
//! than `max_body_bytes` is refused at once (not at the body timeout), and at the connection cap
//! right after a flood of silent connections a newcomer is served, the longest idle making room.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;
use support::KEY;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until the server closes the connection: what it sent.
async fn until_closed(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

async fn proxy(server: &str) -> std::net::SocketAddr {
    let state = support::answering_state(server, "");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(gateway_server::serve(listener, state, std::future::pending()));
    address
}

#[tokio::test(start_paused = true)]
async fn a_body_declared_over_the_limit_gets_413_at_once_before_it_is_read() {
    let address = proxy("body_timeout_s = 30\nmax_body_bytes = 4096").await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    let began = tokio::time::Instant::now();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {KEY}\r\ncontent-type: application/json\r\ncontent-length: 10485760\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("connection: close") && answer.contains("body_too_large"), "{answer}");
    assert!(began.elapsed() < Duration::from_secs(1), "answered at once, not at the body timeout: {:?}", began.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_flood_of_silent_connections_a_newcomer_is_served() {
    let address = proxy("max_connections = 16\nheader_timeout_s = 30").await;
    // Three times the cap of connections that never send a byte: each past the cap makes room
    // by closing the longest idle.
    let mut flood = Vec::new();
    for _ in 0..48 {
        flood.push(TcpStream::connect(address).await.unwrap());
    }
    let health = b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    for attempt in 0..3 {
        let mut newcomer = TcpStream::connect(address).await.unwrap();
        newcomer.write_all(health).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), until_closed(&mut newcomer)).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "newcomer {attempt}: {answer}");
    }
}
