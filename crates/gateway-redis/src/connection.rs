//! The connection to Redis: a pool with an explicit command timeout, fail-fast while
//! disconnected, reconnection with exponential back-off, script loading and NOSCRIPT reload,
//! the time argument of every script, and the mapping of failures to `BackendError`.
//!
//! One Redis or a Redis Cluster, as the URL says (`redis://…` or
//! `redis-cluster://host:port?node=host:port&…`). On a cluster each EVALSHA goes to the primary
//! of its first key's slot (every key of a script shares the scope's hash tag), the scripts are
//! loaded on every primary at connect time, and a primary that answers NOSCRIPT (restarted,
//! promoted from a replica, SCRIPT FLUSH) is given the script again: the reload goes where the
//! EVALSHA went.

use crate::redact::redact;
use crate::scripts::{Script, Scripts};
use fred::prelude::*;
use fred::types::CustomCommand;
use gateway_core::ports::BackendError;
use gateway_core::time::Clock;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How to reach Redis and how long to wait for it.
#[derive(Clone)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]` for one Redis (`rediss://` needs a TLS feature
    /// of fred, which this crate does not enable), or
    /// `redis-cluster://[user:password@]host:port[?node=host:port&node=host:port…]` for a Redis
    /// Cluster (any one node suffices, the others are found with `CLUSTER SLOTS`; more are tried
    /// when the first does not answer). Sentinel (`redis-sentinel://…?sentinelServiceName=…`) is
    /// parsed by fred too; see the README.
    pub url: String,
    /// Connections in the pool (commands are pipelined on each).
    pub pool_size: usize,
    /// Upper bound of every command, so a hung server cannot stall a call (fred's default is
    /// no timeout at all).
    pub command_timeout: Duration,
    /// Upper bound of establishing a connection.
    pub connect_timeout: Duration,
    /// First reconnection delay; doubles up to `reconnect_max`.
    pub reconnect_min: Duration,
    /// Longest reconnection delay. Reconnection never gives up.
    pub reconnect_max: Duration,
    /// The clock of the scripts: `None` uses the Redis server's `TIME`, so workers whose clocks
    /// disagree still agree about windows and cooldowns; tests inject a `ManualClock`.
    pub clock: Option<Arc<dyn Clock>>,
    /// `connect` returns when Redis has not answered within `connect_timeout`, and the pool goes
    /// on connecting in the background by the reconnection policy (operations are
    /// `BackendUnavailable` meanwhile; the scripts load at their first NOSCRIPT): for a gateway
    /// that serves on its own state until Redis answers (`on_unavailable = "local"`). Default
    /// false: `connect` fails.
    pub connect_lazily: bool,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: "redis://127.0.0.1:6379".to_owned(),
            pool_size: 4,
            command_timeout: Duration::from_millis(250),
            connect_timeout: Duration::from_secs(2),
            reconnect_min: Duration::from_millis(50),
            reconnect_max: Duration::from_secs(2),
            clock: None,
            connect_lazily: false,
        }
    }
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact(&self.url))
            .field("pool_size", &self.pool_size)
            .field("command_timeout", &self.command_timeout)
            .field("clock", &self.clock.as_ref().map(|_| "injected"))
            .finish_non_exhaustive()
    }
}

/// A pool of connections to one Redis (or one Redis Cluster), with the scripts loaded. Share it
/// (`Arc`) between the gates and the quota of a process.
pub struct RedisConnection {
    pool: Pool,
    /// Whether the URL named a cluster: scripts are then loaded on every primary.
    clustered: bool,
    options: Options,
    scripts: Scripts,
    clock: Option<Arc<dyn Clock>>,
    degraded: AtomicU64,
    url: String,
    /// How it was asked to connect (the watch for freed capacity connects the same way).
    config: RedisConfig,
    /// This process's name in the scopes' lines across processes (random: unique per pool).
    line_id: Arc<str>,
    /// The line id as a script argument, built once.
    line_arg: Value,
    /// A `watch_freed` hears what the lines hand this process.
    watched: AtomicBool,
}

/// A name no other pool shares: the process and the random keys of std's hasher (drawn per
/// process, and different for each `RandomState` made in it).
fn new_line_id() -> Arc<str> {
    use std::hash::BuildHasher;
    let random = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
    format!("{:x}-{random:016x}", std::process::id()).into()
}

impl RedisConfig {
    /// Reconnection by this configuration: from `reconnect_min`, doubling up to
    /// `reconnect_max`, for ever.
    pub(crate) fn reconnect_policy(&self) -> ReconnectPolicy {
        let ms = |d: Duration| ms(d).min(u64::from(u32::MAX)) as u32;
        ReconnectPolicy::new_exponential(0, ms(self.reconnect_min), ms(self.reconnect_max), 2)
    }

    /// What every connection made by this configuration sets (the pool's and `watch_freed`'s):
    /// the connect timeout, and no Nagle (a command written behind an unacknowledged one would
    /// wait for its ACK).
    pub(crate) fn connection(&self, c: &mut ConnectionConfig) {
        c.connection_timeout = self.connect_timeout;
        c.tcp.nodelay = Some(true);
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl RedisConnection {
    /// Connects the pool and loads every script. Fails with `BackendUnavailable` when Redis
    /// cannot be reached within `connect_timeout`.
    pub async fn connect(config: RedisConfig) -> Result<Arc<Self>, BackendError> {
        let url = redact(&config.url);
        let unavailable = |e: Error| BackendError::BackendUnavailable { backend: "redis", key: url.clone(), detail: e.to_string() };
        let policy = config.reconnect_policy();
        let mut fred_config = Config::from_url(&config.url).map_err(unavailable)?;
        // fred's `fail_fast` is about the first connection only: off, it follows the reconnection
        // policy (for ever) instead of ending the pool's tasks. Commands fail fast either way (their
        // `Options`).
        fred_config.fail_fast = !config.connect_lazily;
        let clustered = fred_config.server.is_clustered();
        let pool = Builder::from_config(fred_config)
            .with_connection_config(|c| {
                config.connection(c);
                c.internal_command_timeout = config.connect_timeout;
                c.max_command_attempts = 1;
            })
            .with_performance_config(|c| c.default_command_timeout = config.command_timeout)
            .set_policy(policy)
            .build_pool(config.pool_size.max(1))
            .map_err(unavailable)?;
        let connected = match tokio::time::timeout(config.connect_timeout, pool.init()).await {
            Ok(Ok(_)) => true,
            Ok(Err(e)) => return Err(unavailable(e)),
            Err(_) if config.connect_lazily => {
                tracing::warn!(url = %url, "redis does not answer yet; connecting in the background");
                false
            }
            Err(_) => {
                return Err(BackendError::BackendUnavailable {
                    backend: "redis",
                    key: url.clone(),
                    detail: "connect timed out".to_owned(),
                });
            }
        };
        let line_id = new_line_id();
        let connection = RedisConnection {
            pool,
            clustered,
            options: Options { fail_fast: true, timeout: Some(config.command_timeout), max_attempts: Some(1), ..Options::default() },
            scripts: Scripts::new(),
            clock: config.clock.clone(),
            degraded: AtomicU64::new(0),
            url: url.clone(),
            config,
            line_arg: Value::String(line_id.to_string().into()),
            line_id,
            watched: AtomicBool::new(false),
        };
        if connected {
            for script in connection.scripts.all() {
                connection.load(script, None).await.map_err(unavailable)?;
            }
        }
        Ok(Arc::new(connection))
    }

    /// Record operations Redis did not take, because it could not answer or answered that the
    /// script could not do its work (each also logged).
    pub fn degraded_records(&self) -> u64 {
        self.degraded.load(Ordering::Relaxed)
    }

    /// The underlying pool, for tests and tools (e.g. to inspect a gate's HASH).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// How the pool was asked to connect.
    pub(crate) fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// This process's name in the scopes' lines across processes: what a settle elsewhere
    /// tells when this process's waiter is the oldest.
    pub fn line_id(&self) -> &Arc<str> {
        &self.line_id
    }

    /// This process's line id as a script argument.
    pub(crate) fn line_arg(&self) -> Value {
        self.line_arg.clone()
    }

    /// Whether a `watch_freed` hears what the lines hand this process: only then does it stand
    /// in them.
    pub(crate) fn is_watched(&self) -> bool {
        self.watched.load(Ordering::Relaxed)
    }

    pub(crate) fn mark_watched(&self) {
        self.watched.store(true, Ordering::Relaxed);
    }

    pub(crate) fn scripts(&self) -> &Scripts {
        &self.scripts
    }

    /// The `now` argument of a script: the injected clock's milliseconds, or '' for `TIME`.
    pub(crate) fn now_arg(&self) -> Value {
        match &self.clock {
            Some(clock) => Value::Integer(i64::try_from(clock.now().as_millis()).unwrap_or(i64::MAX)),
            None => Value::String("".into()),
        }
    }

    /// Runs `script` with EVALSHA on `keys` and the arguments `args` (in parts, concatenated),
    /// reloading it once on NOSCRIPT. `key` names the gate or account in the error.
    pub(crate) async fn run(
        &self,
        script: &Script,
        keys: &[Value],
        args: &[&[Value]],
        key: &(dyn std::fmt::Display + Sync),
    ) -> Result<Value, BackendError> {
        let slot = slot_of(keys);
        let first = self.evalsha(script, slot, keys, args).await;
        let result = match first {
            Err(e) if e.details().starts_with("NOSCRIPT") => {
                tracing::info!(script = script.name, "redis lost the script (restart, failover or SCRIPT FLUSH); reloading");
                // On a cluster, to the primary that answered NOSCRIPT: the one of the keys' slot.
                match self.load(script, slot.filter(|_| self.clustered)).await {
                    Ok(()) => self.evalsha(script, slot, keys, args).await,
                    Err(e) => Err(e),
                }
            }
            other => other,
        };
        result.map_err(|e| {
            let (key, detail) = (key.to_string(), format!("{}: {e}", script.name));
            if is_script_error(&e) {
                BackendError::Malformed { backend: "redis", key, detail }
            } else {
                BackendError::BackendUnavailable { backend: "redis", key, detail }
            }
        })
    }

    /// Runs the plain command `name` with `args` on `key` (routed by its slot), under the
    /// command timeout; an error names `key`.
    pub(crate) async fn command(&self, name: &'static str, key: &str, args: Vec<Value>) -> Result<Value, BackendError> {
        let slot = Some(fred::util::redis_keyslot(key.as_bytes()));
        let mut argv = Vec::with_capacity(1 + args.len());
        argv.push(Value::String(key.into()));
        argv.extend(args);
        self.client_for(slot).with_options(&self.options).custom(CustomCommand::new(name, slot, false), argv).await.map_err(|e| {
            let detail = format!("{name}: {e}");
            if is_script_error(&e) {
                BackendError::Malformed { backend: "redis", key: key.to_owned(), detail }
            } else {
                BackendError::BackendUnavailable { backend: "redis", key: key.to_owned(), detail }
            }
        })
    }

    /// Counts and logs a record operation that Redis did not take (it could not answer, or it
    /// answered that the script could not do its work); the call goes on.
    pub(crate) fn degrade(&self, op: &'static str, error: &BackendError) {
        self.degraded.fetch_add(1, Ordering::Relaxed);
        match error {
            BackendError::Malformed { .. } => {
                tracing::error!(op, %error, "breaker record dropped: the script could not do its work; the call continues")
            }
            _ => tracing::warn!(op, %error, "breaker record dropped: redis unavailable; the call continues"),
        }
    }

    /// `args` in parts, so that a caller's cached arguments are copied once, into the command.
    /// Routed by `slot`, the first key's ([`slot_of`]).
    async fn evalsha(&self, script: &Script, slot: Option<u16>, keys: &[Value], args: &[&[Value]]) -> Result<Value, Error> {
        let mut argv: Vec<Value> = Vec::with_capacity(2 + keys.len() + args.iter().map(|part| part.len()).sum::<usize>());
        argv.push(script.sha_arg.clone());
        argv.push(Value::Integer(keys.len() as i64));
        argv.extend(keys.iter().cloned());
        for part in args {
            argv.extend(part.iter().cloned());
        }
        self.client_for(slot).with_options(&self.options).custom(CustomCommand::new("EVALSHA", slot, false), argv).await
    }

    /// The pool's client a command on `slot` goes to. One scope's keys share a slot, so its
    /// commands go on one connection, and Redis runs them in the order they were sent (a release
    /// sent before a waiter's admission is made before it: `AttemptGate::record`); while that
    /// client is not connected, the next connected one after it, the same for every command of
    /// the slot. Commands without a key: round the pool.
    fn client_for(&self, slot: Option<u16>) -> &Client {
        let clients = self.pool.clients();
        let Some(first) = slot.map(|slot| usize::from(slot) % clients.len().max(1)) else { return self.pool.next_connected() };
        let mut after = clients.iter().skip(first).chain(clients.iter().take(first));
        after.find(|client| client.is_connected()).unwrap_or_else(|| self.pool.next_connected())
    }

    /// Loads `script`: on the one server; on a cluster, on the primary of `slot`, or on every
    /// primary without one (at connect time). fred's cluster-wide `SCRIPT LOAD` answers the
    /// SHA1 it computed itself, after every primary answered without an error; it takes no
    /// per-command options (fred 10.1 has no `LuaInterface` for `WithOptions`), so it is bounded
    /// by the pool's default command timeout, the same `command_timeout`.
    async fn load(&self, script: &Script, slot: Option<u16>) -> Result<(), Error> {
        let sha: String = if self.clustered && slot.is_none() {
            self.pool.script_load_cluster(script.lua.as_str()).await?
        } else {
            self.client_for(slot)
                .with_options(&self.options)
                .custom(CustomCommand::new("SCRIPT", slot, false), vec!["LOAD", script.lua.as_str()])
                .await?
        };
        if sha != script.sha {
            return Err(Error::new(ErrorKind::Unknown, format!("script {} loaded as {sha}, expected {}", script.name, script.sha)));
        }
        Ok(())
    }

    /// The server this connection talks to, without credentials.
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// The slot of a script's first key: where its EVALSHA (and, on a cluster, its reload) goes.
/// Every key of a script shares the scope's hash tag (`keys.rs`), so one slot holds them all.
fn slot_of(keys: &[Value]) -> Option<u16> {
    keys.first().and_then(Value::as_bytes).map(fred::util::redis_keyslot)
}

/// Whether Redis answered, and the answer is that the script could not do its work: an error
/// reply of our own (`MALFORMED …`), a Lua runtime or compile error (`ERR user_script:…`,
/// `ERR Error …`), or a key of the wrong type (`WRONGTYPE`). That is a bug or state this build
/// cannot read, not an outage: admission must not fail closed on it as if Redis were down, and
/// the error says what is wrong. Decided by the error's code, its first word: Redis 7 appends
/// `script: <sha>, on @user_script:N.` to every error a command inside a script meets, so an
/// outage met inside the script (`READONLY` after a failover, `OOM`, `MISCONF`, `NOREPLICAS`,
/// `MASTERDOWN`, `CLUSTERDOWN`, `LOADING`, `BUSY`…) still reads as unavailable.
fn is_script_error(e: &Error) -> bool {
    let details = e.details();
    let code = details.split_whitespace().next().unwrap_or_default();
    match code {
        "MALFORMED" | "WRONGTYPE" => true,
        "ERR" => {
            let rest = details["ERR".len()..].trim_start();
            rest.starts_with("user_script:") || rest.starts_with("Error compiling script") || rest.starts_with("Error running script")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::is_script_error;
    use fred::error::{Error, ErrorKind};

    #[test]
    fn script_errors_are_told_from_an_unavailable_redis() {
        let reply = |text: &str| Error::new(ErrorKind::Unknown, text.to_owned());
        assert!(is_script_error(&reply("MALFORMED gate parameters: 1 2")));
        assert!(is_script_error(&reply("ERR user_script:12: attempt to perform arithmetic on a nil value")));
        assert!(is_script_error(&Error::new(
            ErrorKind::InvalidArgument,
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        )));
        assert!(!is_script_error(&Error::new(ErrorKind::Timeout, "Request timed out.")));
        assert!(!is_script_error(&Error::new(ErrorKind::IO, "Connection reset by peer")));
        assert!(!is_script_error(&reply("LOADING Redis is loading the dataset in memory")));
        let inside = " script: a7f1, on @user_script:93.";
        for outage in [
            "READONLY You can't write against a read only replica.",
            "OOM command not allowed",
            "NOREPLICAS Not enough good replicas to write.",
            "MASTERDOWN Link with MASTER is down",
            "CLUSTERDOWN The cluster is down",
            "MISCONF Redis is configured to save RDB snapshots",
        ] {
            assert!(!is_script_error(&reply(&format!("{outage}{inside}"))), "{outage}");
        }
        assert!(is_script_error(&reply(&format!("WRONGTYPE Operation against a key holding the wrong kind of value{inside}"))));
        assert!(is_script_error(&reply("ERR Error compiling script (new function): user_script:1: ...")));
        assert!(!is_script_error(&reply("BUSY Redis is busy running a script")));
    }

    /// The URL forms the README gives: fred 10.1 picks the deployment by the scheme's suffix
    /// (`-cluster`, `-sentinel`), so `redis://…?node=…` is still one server.
    #[test]
    fn the_url_scheme_names_the_deployment() {
        use fred::types::config::Config;
        let cluster = Config::from_url("redis-cluster://127.0.0.1:7001?node=127.0.0.1:7002&node=127.0.0.1:7003").unwrap();
        assert!(cluster.server.is_clustered());
        let mut ports: Vec<u16> = cluster.server.hosts().iter().map(|server| server.port).collect();
        ports.sort_unstable();
        assert_eq!(ports, [7001, 7002, 7003]);
        assert!(!Config::from_url("redis://127.0.0.1:7001?node=127.0.0.1:7002").unwrap().server.is_clustered());
        let sentinel = Config::from_url("redis-sentinel://127.0.0.1:26379/0?sentinelServiceName=gw&node=127.0.0.1:26380").unwrap();
        assert!(sentinel.server.is_sentinel());
        assert_eq!(sentinel.server.hosts().len(), 2);
        assert!(Config::from_url("redis-sentinel://127.0.0.1:26379").is_err(), "the service name is required");
    }
}
