//! The call machine's rules as scripts of events, run without a runtime: the behaviour matrix
//! of seed 003 §4 ([`matrix`]), the loop's rules of SPEC §5, §7, §8 ([`rules`]), a 429's
//! pushback ([`pushback`]) and a stream's commit point of §13 ([`streams`]). Each test is a script and the trace it must give
//! ([`script::trace`]), kept as an inline `insta` snapshot.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod matrix;
mod pushback;
mod rules;
mod script;
mod streams;
