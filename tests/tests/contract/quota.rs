//! Quota contract on the `QuotaGate` port: concurrency, rpm and tpm limits with their retry
//! hints, settle, release and lease expiry. The same bodies run on every backend.

#![allow(clippy::unwrap_used)]

use crate::support::Backend;
use gateway_core::policy::QuotaLimits;
use gateway_core::ports::{Permit, QuotaDecision, QuotaLimit};
use std::time::Duration;

fn limits(max_concurrency: Option<u32>, rpm: Option<u32>, tpm: Option<u32>) -> QuotaLimits {
    QuotaLimits { max_concurrency, rpm, tpm, permit_ttl: Duration::from_secs(60) }
}

async fn granted(b: &Backend, source: &str, l: &QuotaLimits, tokens: u32) -> Permit {
    match b.quota.acquire(&b.key(source), l, tokens).await.unwrap() {
        QuotaDecision::Granted(permit) => permit,
        refused => panic!("expected a permit, got {refused:?}"),
    }
}

async fn refused(b: &Backend, source: &str, l: &QuotaLimits, tokens: u32) -> (QuotaLimit, Duration) {
    match b.quota.acquire(&b.key(source), l, tokens).await.unwrap() {
        QuotaDecision::Refused { limit, retry_after } => (limit, retry_after),
        QuotaDecision::Granted(permit) => panic!("expected a refusal, got {permit:?}"),
    }
}

pub async fn quota_concurrency_frees_on_release(b: Backend) {
    let l = limits(Some(2), None, None);
    b.at(0.0);
    let first = granted(&b, "q", &l, 0).await;
    let second = granted(&b, "q", &l, 0).await;
    assert_ne!(first.id, second.id);
    assert_eq!(refused(&b, "q", &l, 0).await, (QuotaLimit::Concurrency, Duration::ZERO));
    b.quota.release(&first).await.unwrap();
    b.quota.release(&first).await.unwrap(); // twice is harmless
    granted(&b, "q", &l, 0).await;
    assert_eq!(refused(&b, "q", &l, 0).await.0, QuotaLimit::Concurrency);
    granted(&b, "other", &l, 0).await; // accounts are separate
}

pub async fn quota_leases_of_a_crashed_worker_expire(b: Backend) {
    let l = limits(Some(1), None, None);
    b.at(0.0);
    granted(&b, "q", &l, 0).await; // never released
    b.at(59.999);
    assert_eq!(refused(&b, "q", &l, 0).await.0, QuotaLimit::Concurrency);
    b.at(60.0);
    granted(&b, "q", &l, 0).await;
}

pub async fn quota_rpm_hints_when_the_oldest_start_leaves(b: Backend) {
    let l = limits(None, Some(2), None);
    b.at(10.0);
    granted(&b, "q", &l, 0).await;
    b.at(20.0);
    granted(&b, "q", &l, 0).await;
    b.at(30.0);
    assert_eq!(refused(&b, "q", &l, 0).await, (QuotaLimit::RequestsPerMinute, Duration::from_secs(40)));
    b.at(69.999);
    assert_eq!(refused(&b, "q", &l, 0).await.0, QuotaLimit::RequestsPerMinute);
    b.at(70.0);
    granted(&b, "q", &l, 0).await;
}

pub async fn quota_tpm_charges_the_estimate_and_settle_corrects_it(b: Backend) {
    let l = limits(None, None, Some(1000));
    b.at(0.0);
    let big = granted(&b, "q", &l, 600).await;
    b.at(10.0);
    granted(&b, "q", &l, 300).await;
    b.at(20.0);
    assert_eq!(refused(&b, "q", &l, 200).await, (QuotaLimit::TokensPerMinute, Duration::from_secs(40)));
    b.quota.settle(&big, 100).await.unwrap();
    granted(&b, "q", &l, 200).await;
    // a request larger than the whole tpm waits for an empty window, then runs alone
    assert_eq!(refused(&b, "q", &l, 5000).await, (QuotaLimit::TokensPerMinute, Duration::from_secs(60)));
    b.at(80.0);
    granted(&b, "q", &l, 5000).await;
}

pub async fn quota_refusal_names_the_first_limit_and_the_longest_wait(b: Backend) {
    let l = limits(Some(1), Some(1), Some(10));
    b.at(0.0);
    granted(&b, "q", &l, 10).await;
    b.at(15.0);
    assert_eq!(refused(&b, "q", &l, 5).await, (QuotaLimit::Concurrency, Duration::from_secs(45)));
    let zero = limits(None, Some(0), None);
    assert_eq!(refused(&b, "zero", &zero, 0).await, (QuotaLimit::RequestsPerMinute, Duration::from_secs(60)));
}
