//! The harness of the test targets whose cases need a live Redis (`harness = false`, built on
//! libtest-mimic because libtest cannot mark a test ignored at run time): it asks once whether
//! Redis answers at `GATEWAY_REDIS_URL` (default `redis://127.0.0.1:6379`), then runs each case
//! as `redis::<case>`; without Redis it reports each case ignored and says so on stderr, or,
//! with `GATEWAY_REDIS_REQUIRED=1` (or `true`), fails each one with the reason. A case is
//! never reported `ok` without having run.
//!
//! Asked to run ignored cases (`--ignored`, `--include-ignored`) with no Redis, a case still
//! does not run: it reports itself ignored, with the reason, at run time. Only the environment
//! variable turns a missing Redis into a failure, so one knob says whether a run must have
//! Redis, whatever flags reach the binary.

use libtest_mimic::{Arguments, Completion, Failed, Trial};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

/// Where the Redis cases look for Redis when `GATEWAY_REDIS_URL` is unset.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// How long the probe waits to connect, and then for the answer to its PING.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// One case: its name (reported as `redis::<name>`) and its body, which gets the Redis URL and
/// fails by panicking, like a `#[test]`.
pub type Case = (&'static str, fn(String));

/// The Redis URL of this run: `GATEWAY_REDIS_URL`, or [`DEFAULT_URL`].
pub fn url() -> String {
    std::env::var("GATEWAY_REDIS_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// Whether this run must have Redis: `GATEWAY_REDIS_REQUIRED` is `1` or `true`.
pub fn required() -> bool {
    std::env::var("GATEWAY_REDIS_REQUIRED").is_ok_and(|v| v == "1" || v == "true")
}

/// Whether a Redis server answers at `url`: a TCP connect and a `PING`, each bounded by
/// `timeout`. Any RESP reply counts (`+PONG`, or an error such as `-NOAUTH` from a server that
/// wants the password the URL carries). A `rediss://` URL is probed by its TCP connect alone.
/// A Redis Cluster URL (`redis-cluster://host:port?node=host:port&…`, `rediss-cluster://`) is
/// probed at its first host, the one before the query.
pub fn answers(url: &str, timeout: Duration) -> Result<(), String> {
    let (tls, rest) = if let Some(rest) = url.strip_prefix("redis://").or_else(|| url.strip_prefix("redis-cluster://")) {
        (false, rest)
    } else if let Some(rest) = url.strip_prefix("rediss://").or_else(|| url.strip_prefix("rediss-cluster://")) {
        (true, rest)
    } else {
        return Err("not a redis://, rediss://, redis-cluster:// or rediss-cluster:// URL".to_owned());
    };
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let host_port = if host_port.ends_with(']') || !host_port.contains(':') { format!("{host_port}:6379") } else { host_port.to_owned() };
    let addresses: Vec<_> = host_port.to_socket_addrs().map_err(|e| format!("cannot resolve {host_port}: {e}"))?.collect();
    let mut last = format!("{host_port} resolves to no address");
    for address in addresses {
        match TcpStream::connect_timeout(&address, timeout) {
            Ok(_) if tls => return Ok(()),
            Ok(stream) => match ping(stream, timeout) {
                Ok(()) => return Ok(()),
                Err(e) => last = format!("{address}: {e}"),
            },
            Err(e) => last = format!("{address}: {e}"),
        }
    }
    Err(last)
}

fn ping(mut stream: TcpStream, timeout: Duration) -> Result<(), String> {
    stream.set_read_timeout(Some(timeout)).and_then(|()| stream.set_write_timeout(Some(timeout))).map_err(|e| e.to_string())?;
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").map_err(|e| format!("PING not sent: {e}"))?;
    let mut first = [0u8; 1];
    stream.read_exact(&mut first).map_err(|e| format!("no answer to PING: {e}"))?;
    match first[0] {
        b'+' | b'-' => Ok(()),
        other => Err(format!("the answer to PING is not Redis's (it opens with byte {other:#04x})")),
    }
}

/// The line printed once, before the run, when the cases are skipped.
fn skipped_line(count: usize, url: &str) -> String {
    format!(
        "SKIPPED {count} Redis case{}: nothing answers at {url} (start Redis or set GATEWAY_REDIS_URL; GATEWAY_REDIS_REQUIRED=1 makes this a failure)",
        if count == 1 { "" } else { "s" }
    )
}

/// A case whose name is known only at run time (the contract suite's come from data files):
/// its name (reported as `redis::<name>`) and its body, given the Redis URL.
pub struct NamedCase {
    /// The case's name, without the `redis::` prefix.
    pub name: String,
    /// The body: fails by panicking, like a `#[test]`.
    pub body: Box<dyn FnOnce(String) + Send>,
}

/// `cases` as closures of no argument, each given `url`.
fn at_url(cases: Vec<NamedCase>, url: &str) -> Vec<(String, Box<dyn FnOnce() + Send>)> {
    cases
        .into_iter()
        .map(|NamedCase { name, body }| {
            let url = url.to_owned();
            let body: Box<dyn FnOnce() + Send> = Box::new(move || body(url));
            (format!("redis::{name}"), body)
        })
        .collect()
}

/// What is missing when the probe of `url` failed, as the skip and failure messages say it.
fn missing_at(url: &str, probe: &Result<(), String>) -> Option<String> {
    probe.as_ref().err().map(|why| format!("nothing answers at {url} ({why})"))
}

const HINT: &str = "start Redis or set GATEWAY_REDIS_URL";

/// Trials for cases that need something this machine may lack (a live Redis, a `redis-server`
/// to start): run where `missing` is `None`; else failed with the reason when `required`
/// (`GATEWAY_REDIS_REQUIRED`), or reported ignored with it, never `ok`. `hint` says how to
/// provide what is missing.
pub fn gated(cases: Vec<(String, Box<dyn FnOnce() + Send>)>, missing: Option<&str>, hint: &str, required: bool) -> Vec<Trial> {
    cases
        .into_iter()
        .map(|(name, body)| match missing {
            None => Trial::test(name, move || {
                body();
                Ok(())
            }),
            Some(why) if required => {
                let reason = format!("GATEWAY_REDIS_REQUIRED is set and {why}: {hint}");
                Trial::test(name, move || Err(Failed::from(reason)))
            }
            Some(why) => {
                let reason = format!("not run: {why}");
                Trial::ignorable_test(name, move || Ok(Completion::ignored_with(reason))).with_ignored_flag(true)
            }
        })
        .collect()
}

/// The `main` of a Redis test target: parses libtest's command line, probes Redis once and runs
/// `cases` as described in this module's doc.
pub fn run(cases: &[Case]) -> ExitCode {
    let named = cases.iter().map(|&(name, body)| NamedCase { name: name.to_owned(), body: Box::new(body) }).collect();
    run_with(Vec::new(), named)
}

/// [`run`] for a target that also has cases needing no Redis (`plain`, run as they are) and
/// Redis cases named at run time.
pub fn run_with(plain: Vec<Trial>, cases: Vec<NamedCase>) -> ExitCode {
    let url = url();
    let probe = answers(&url, PROBE_TIMEOUT);
    run_gated(plain, at_url(cases, &url), missing_at(&url, &probe).as_deref(), HINT, |count| skipped_line(count, &url))
}

/// The `main` of a target whose `cases` need something this machine may lack (`missing` says
/// what, when it does; `hint` how to provide it), beside `plain` cases that need nothing: the
/// gated cases as [`gated`] makes them, and, when they are skipped, `skipped(count)` printed
/// once on stderr before the run.
pub fn run_gated(
    plain: Vec<Trial>,
    cases: Vec<(String, Box<dyn FnOnce() + Send>)>,
    missing: Option<&str>,
    hint: &str,
    skipped: impl Fn(usize) -> String,
) -> ExitCode {
    let args = Arguments::from_args();
    let required = required();
    let gated = gated(cases, missing, hint, required);
    if missing.is_some() && !required && !args.list {
        let count = gated.iter().filter(|t| !args.is_filtered_out(t)).count();
        if count > 0 {
            let _ = writeln!(std::io::stderr(), "{}", skipped(count));
        }
    }
    libtest_mimic::run(&args, plain.into_iter().chain(gated).collect()).exit_code()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{Case, NamedCase, answers, skipped_line};
    use libtest_mimic::Arguments;
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    const CASES: &[Case] = &[("one", |_| {}), ("two", |_| panic!("ran"))];

    fn trials(cases: &[Case], url: &str, probe: &Result<(), String>, required: bool) -> Vec<libtest_mimic::Trial> {
        let named = cases.iter().map(|&(name, body)| NamedCase { name: name.to_owned(), body: Box::new(body) }).collect();
        super::gated(super::at_url(named, url), super::missing_at(url, probe).as_deref(), super::HINT, required)
    }

    /// Runs `trials` as the harness would, its report in a file rather than amid this test's.
    fn run(trials: Vec<libtest_mimic::Trial>, extra: &[&str]) -> libtest_mimic::Conclusion {
        static RUNS: AtomicU32 = AtomicU32::new(0);
        let n = RUNS.fetch_add(1, Ordering::Relaxed);
        let log = std::env::temp_dir().join(format!("redis-cases-{}-{n}.log", std::process::id()));
        let log = log.to_str().unwrap();
        let args = Arguments::from_iter(["redis", "--test-threads", "1", "--logfile", log].iter().chain(extra));
        let conclusion = libtest_mimic::run(&args, trials);
        let _ = std::fs::remove_file(log);
        conclusion
    }

    #[test]
    fn without_redis_the_cases_are_ignored_even_when_ignored_ones_are_asked_for() {
        let missing = Err("refused".to_owned());
        for flags in [&[][..], &["--include-ignored"], &["--ignored"]] {
            let c = run(trials(CASES, "redis://127.0.0.1:1", &missing, false), flags);
            assert_eq!((c.num_passed, c.num_failed, c.num_ignored), (0, 0, 2), "{flags:?}");
        }
    }

    #[test]
    fn without_redis_a_required_run_fails_every_case_and_with_redis_the_cases_run() {
        let c = run(trials(CASES, "redis://127.0.0.1:1", &Err("refused".to_owned()), true), &[]);
        assert_eq!((c.num_passed, c.num_failed, c.num_ignored), (0, 2, 0));
        let c = run(trials(CASES, "redis://127.0.0.1:6379", &Ok(()), false), &[]);
        assert_eq!((c.num_passed, c.num_failed, c.num_ignored), (1, 1, 0));
    }

    #[test]
    fn the_probe_needs_a_redis_answer_not_just_an_open_port() {
        assert!(answers("http://127.0.0.1:6379", Duration::from_millis(100)).unwrap_err().contains("not a redis://"));
        // A listener that accepts and never answers: the PING times out.
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("redis://user:pw@{}/0", silent.local_addr().unwrap());
        assert!(answers(&url, Duration::from_millis(100)).unwrap_err().contains("no answer to PING"));
        // A cluster URL is probed at its first host, before the query.
        let cluster = format!("redis-cluster://{}?node=127.0.0.1:1&node=127.0.0.1:2", silent.local_addr().unwrap());
        assert!(answers(&cluster, Duration::from_millis(100)).unwrap_err().contains("no answer to PING"));
        let closed = silent.local_addr().unwrap().port();
        drop(silent);
        assert!(answers(&format!("redis://127.0.0.1:{closed}"), Duration::from_millis(100)).is_err());
    }

    #[test]
    fn the_skipped_line_counts_the_cases_and_names_the_url_and_the_variables() {
        assert_eq!(
            skipped_line(2, "redis://127.0.0.1:1"),
            "SKIPPED 2 Redis cases: nothing answers at redis://127.0.0.1:1 (start Redis or set GATEWAY_REDIS_URL; GATEWAY_REDIS_REQUIRED=1 makes this a failure)"
        );
        assert!(skipped_line(1, "u").starts_with("SKIPPED 1 Redis case: "));
    }
}
