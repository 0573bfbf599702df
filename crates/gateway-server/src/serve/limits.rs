//! The limits of serving: the file-descriptor limit, the connection cap kept below it, and a
//! connection's time limits.

use crate::config::ServerConfig;
use std::time::Duration;

/// File descriptors kept for everything but client connections (upstream pools, Redis, files):
/// a quarter of the limit, at least this many.
const RESERVED_FDS: u64 = 256;
/// The default connection cap never exceeds this.
const DEFAULT_MAX_CONNECTIONS: u64 = 16_384;

/// The process's file-descriptor limit, raised to its hard maximum first (as Go's runtime does):
/// the soft limit is often 1 024 while the hard one is far higher.
pub fn fd_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let hard = limit.maximum.unwrap_or(1 << 20).min(1 << 20);
    if limit.current.is_some_and(|soft| soft < hard) {
        let _ = setrlimit(Resource::Nofile, rustix::process::Rlimit { current: Some(hard), maximum: limit.maximum });
    }
    getrlimit(Resource::Nofile).current.unwrap_or(hard)
}

/// Why `server.max_connections` cannot be had with the process's file-descriptor limit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionCapError {
    /// The configured cap leaves less than the reserve free.
    #[error(
        "server.max_connections: value {max} is out of range (expected at most {most}: the file-descriptor limit {fds} less {reserve} kept for upstream connections, Redis and files)"
    )]
    OutOfRange {
        /// The configured cap.
        max: usize,
        /// The most the limit allows.
        most: u64,
        /// The file-descriptor limit.
        fds: u64,
        /// The descriptors kept for everything but client connections.
        reserve: u64,
    },
    /// The limit leaves nothing for client connections.
    #[error("server.max_connections: the file-descriptor limit {fds} leaves no room for client connections")]
    NoRoom {
        /// The file-descriptor limit.
        fds: u64,
    },
}

/// The connection cap for a file-descriptor limit of `fds`: the configured one, which must leave
/// the reserve free, or three quarters of the limit (at most 16 384).
pub fn connection_cap(configured: Option<usize>, fds: u64) -> Result<usize, ConnectionCapError> {
    let reserve = (fds / 4).max(RESERVED_FDS);
    let most = fds.saturating_sub(reserve);
    let cap = match configured {
        Some(max) if max as u64 > most => {
            return Err(ConnectionCapError::OutOfRange { max, most, fds, reserve });
        }
        Some(max) => max as u64,
        None => most.min(DEFAULT_MAX_CONNECTIONS),
    };
    if cap == 0 {
        return Err(ConnectionCapError::NoRoom { fds });
    }
    Ok(usize::try_from(cap).unwrap_or(usize::MAX))
}

/// A connection's time limits.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub(super) idle: Duration,
    pub(super) header: Duration,
    /// How long a response may wait on a client that stopped reading it (the body timeout).
    pub(super) write: Duration,
}

impl Limits {
    pub(super) fn of(config: &ServerConfig) -> Self {
        Limits {
            idle: Duration::from_secs_f64(config.idle_timeout_s),
            header: Duration::from_secs_f64(config.header_timeout_s),
            write: Duration::from_secs_f64(config.body_timeout_s),
        }
    }
}
#[cfg(test)]
mod tests {
    use super::{ConnectionCapError, connection_cap};

    #[test]
    fn the_connection_cap_leaves_the_reserve_free() {
        assert_eq!(connection_cap(None, 1024), Ok(768));
        assert_eq!(connection_cap(None, 1 << 20), Ok(16_384));
        assert_eq!(connection_cap(Some(500), 1024), Ok(500));
        assert_eq!(
            connection_cap(Some(1100), 1024).unwrap_err().to_string(),
            "server.max_connections: value 1100 is out of range (expected at most 768: the file-descriptor limit 1024 less 256 kept for upstream connections, Redis and files)"
        );
        let none = connection_cap(None, 200).unwrap_err();
        assert_eq!(none, ConnectionCapError::NoRoom { fds: 200 }, "no room at all");
        assert_eq!(none.to_string(), "server.max_connections: the file-descriptor limit 200 leaves no room for client connections");
    }
}
