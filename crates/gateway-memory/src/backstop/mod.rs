//! A shared backend (Redis) with an in-process backstop: what the gates, quota and pacers do
//! while the shared backend cannot answer (`[backend] on_unavailable`).
//!
//! - `fail_closed` (the default): an admission question the backend cannot answer fails the
//!   call with `BackendUnavailable`; records are dropped and counted.
//! - `local`: the process admits on its own in-memory gates, quota and pacers. Each gate starts
//!   from the last state this process read of it from the shared backend (an OPEN gate stays
//!   OPEN until the `open_until` it was read with; a HALF_OPEN one is OPEN until now: one probe),
//!   under an incarnation of its own, so records of attempts the shared gate admitted are
//!   refused by the local one, and the other way round. The quota starts empty (each process
//!   enforces the whole limit alone) and the pacer at its initial limit.
//!
//! Both modes share one outage detector for the three ports: the first `BackendUnavailable`
//! starts a degraded period (logged, counted); while it lasts, one operation per `retry_every`
//! asks the shared backend again (the rest do not wait out its timeout), and the first answer
//! ends it (logged with its length): the process is back on the shared backend. A new period
//! starts the local state afresh. A record or a release goes where its admission was made: a
//! local gate's (its fence names a local incarnation), a local permit's (likewise) or a local
//! lease's (its id carries [`LOCAL_LEASE`]) to the local state, every other to the shared
//! backend; while that cannot answer, it waits for it (records run off the answer's path, in
//! the client's background), asking with the rest once per `retry_every`, for at most
//! [`RECORD_WAIT`], then it is dropped and counted (a lease it held expires there by itself).

mod ask;
mod combined;
mod gates;
mod outage;
mod pacer;
mod quota;

use serde::{Deserialize, Serialize};
use std::time::Duration;

pub use combined::BackstopAttempts;
pub use gates::BackstopGates;
pub use outage::{Backstop, BackstopStats};
pub use pacer::BackstopPacer;
pub use quota::BackstopQuota;

/// What the gates, quota and pacers do while the shared backend cannot answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnUnavailable {
    /// Admission fails with `BackendUnavailable` (calls end 503 through the proxy).
    #[default]
    FailClosed,
    /// Each process admits on its own in-memory state until the backend answers again.
    Local,
}

impl OnUnavailable {
    /// The config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            OnUnavailable::FailClosed => "fail_closed",
            OnUnavailable::Local => "local",
        }
    }
}

/// Set on the id of a lease the local pacer granted, so its release finds its way back.
pub const LOCAL_LEASE: u64 = 1 << 63;

/// How often a degraded process asks the shared backend again, by default.
pub const RETRY_EVERY: Duration = Duration::from_millis(200);

/// How long a record of the shared backend's admission waits for it to answer again.
pub const RECORD_WAIT: Duration = Duration::from_secs(5);
