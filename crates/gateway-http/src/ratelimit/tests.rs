//! The rate-limit headers of both dialects, their formats, and junk that is ignored and counted.

use super::*;

struct At(u64);

impl WallClock for At {
    fn unix_now(&self) -> Duration {
        Duration::from_secs(self.0)
    }
}

/// 2026-12-03T07:00:00Z.
const NOW: u64 = 1_796_281_200;

fn read_pairs(pairs: &[(&str, &str)]) -> RateRead {
    read_with(|name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v), &At(NOW))
}

fn report(limit: Option<u64>, remaining: u64, reset_ms: u64) -> Option<RateReport> {
    Some(RateReport { limit, remaining, reset: Duration::from_millis(reset_ms) })
}

#[test]
fn go_durations_as_openai_sends_them() {
    let ms = |t: &str| go_duration(t).map(|d| d.as_millis());
    assert_eq!(ms("1s"), Some(1000));
    assert_eq!(ms("6m0s"), Some(360_000));
    assert_eq!(ms("12ms"), Some(12));
    assert_eq!(ms("1h2m3.5s"), Some(3_723_500));
    assert_eq!(ms("0s"), Some(0));
    assert_eq!(ms(" 250us "), Some(0));
    for junk in ["", "s", "1", "1x", "-1s", "1.2.3s", "10000h", "87600h", "nan", "1e3s", "1s2"] {
        assert_eq!(go_duration(junk), None, "{junk:?}");
    }
}

#[test]
fn go_durations_are_written_as_they_are_read() {
    for (ms, text) in [(0, "0ms"), (12, "12ms"), (1000, "1s"), (1500, "1.5s"), (360_000, "6m0s"), (3_723_500, "62m3.5s")] {
        assert_eq!(go_duration_text(Duration::from_millis(ms)), text);
        assert_eq!(go_duration(text), Some(Duration::from_millis(ms)), "{text} reads back");
    }
}

#[test]
fn openais_headers_give_both_budgets() {
    let read = read_pairs(&[
        ("x-ratelimit-limit-requests", "60"),
        ("x-ratelimit-remaining-requests", "59"),
        ("x-ratelimit-reset-requests", "1s"),
        ("x-ratelimit-limit-tokens", "150000"),
        ("x-ratelimit-remaining-tokens", "149984"),
        ("x-ratelimit-reset-tokens", "6m0s"),
    ]);
    let signal = read.signal.unwrap();
    assert_eq!(signal.requests, report(Some(60), 59, 1000));
    assert_eq!(signal.tokens, report(Some(150_000), 149_984, 360_000));
    assert_eq!(read.unreadable, 0);
    assert_eq!(read_pairs(&[]), RateRead::default(), "no headers: no signal");
    let bare = read_pairs(&[("x-ratelimit-remaining-requests", "0")]).signal.unwrap();
    assert_eq!(bare.requests, report(None, 0, 0), "a remaining count alone is a report");
}

#[test]
fn anthropics_headers_reset_at_rfc3339_times() {
    let read = read_pairs(&[
        ("anthropic-ratelimit-requests-limit", "50"),
        ("anthropic-ratelimit-requests-remaining", "0"),
        ("anthropic-ratelimit-requests-reset", "2026-12-03T07:00:12Z"),
        ("anthropic-ratelimit-input-tokens-limit", "40000"),
        ("anthropic-ratelimit-input-tokens-remaining", "30000"),
        ("anthropic-ratelimit-input-tokens-reset", "2026-12-03T07:00:01.5+00:00"),
        ("anthropic-ratelimit-output-tokens-limit", "8000"),
        ("anthropic-ratelimit-output-tokens-remaining", "700"),
        ("anthropic-ratelimit-output-tokens-reset", "2026-12-03T08:00:03+01:00"),
    ]);
    let signal = read.signal.unwrap();
    assert_eq!(signal.requests, report(Some(50), 0, 12_000));
    assert_eq!(signal.tokens, report(Some(8000), 700, 3000), "the token budget with the fewest left");
    let past =
        read_pairs(&[("anthropic-ratelimit-requests-remaining", "3"), ("anthropic-ratelimit-requests-reset", "2026-12-03T06:59:00Z")]);
    assert_eq!(past.signal.unwrap().requests, report(None, 3, 0), "a reset already past is now");
}

#[test]
fn junk_negative_and_absurd_values_are_ignored_and_counted() {
    let cases: &[&[(&str, &str)]] = &[
        &[("x-ratelimit-remaining-requests", "-1")],
        &[("x-ratelimit-remaining-requests", "many")],
        &[("x-ratelimit-remaining-requests", "1e3")],
        &[("x-ratelimit-remaining-requests", "99999999999999999999999")],
        &[("x-ratelimit-remaining-requests", "5"), ("x-ratelimit-limit-requests", "4")],
        &[("x-ratelimit-remaining-requests", "0"), ("x-ratelimit-limit-requests", "0")],
        &[("x-ratelimit-remaining-requests", "5"), ("x-ratelimit-reset-requests", "87600h")],
        &[("x-ratelimit-remaining-requests", "5"), ("x-ratelimit-reset-requests", "-3s")],
        &[("anthropic-ratelimit-requests-remaining", "5"), ("anthropic-ratelimit-requests-reset", "2036-12-03T07:00:00Z")],
        &[("anthropic-ratelimit-requests-remaining", "5"), ("anthropic-ratelimit-requests-reset", "tomorrow")],
        &[("x-ratelimit-remaining-requests", "\u{fffd}")],
    ];
    for pairs in cases {
        assert_eq!(read_pairs(pairs), RateRead { signal: None, unreadable: 1 }, "{pairs:?}");
    }
    let one_bad = read_pairs(&[("x-ratelimit-remaining-requests", "7"), ("x-ratelimit-remaining-tokens", "-5")]);
    assert_eq!((one_bad.signal.unwrap().requests, one_bad.signal.unwrap().tokens, one_bad.unreadable), (report(None, 7, 0), None, 1));
}

#[test]
fn a_header_map_is_read_the_same() {
    let mut headers = HeaderMap::new();
    headers.insert("x-ratelimit-remaining-requests", "0".parse().unwrap());
    headers.insert("x-ratelimit-reset-requests", "120ms".parse().unwrap());
    headers.insert("x-ratelimit-limit-requests", reqwest::header::HeaderValue::from_bytes(b"\xff").unwrap());
    assert_eq!(read(&headers, &At(NOW)), RateRead { signal: None, unreadable: 1 }, "a value that is not text is junk");
    headers.remove("x-ratelimit-limit-requests");
    assert_eq!(read(&headers, &At(NOW)).signal.unwrap().requests, report(None, 0, 120));
}
