//! Redis faults for the soak (`--fault`): a Redis server of the run's own, started on a free
//! loopback port (a fault never touches a shared Redis), and the fault injected into it at its
//! time on the run's time line.
//!
//! - `kill@T+D`: the server is killed at T seconds and started again, empty, D seconds later
//!   (a crash and a restart without persistence);
//! - `flush@T`: `FLUSHALL` at T (every gate, account and pacer is lost; Redis keeps answering);
//! - `pause@T+D`: `CLIENT PAUSE` for D seconds at T (a hung server: commands wait).
//!
//! T and D are scenario seconds, scaled like every other duration of a real-time run.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// One fault and when it happens, in scenario seconds.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Fault {
    /// Killed at `at`, started again (empty) `down` seconds later.
    Kill {
        /// When.
        at: f64,
        /// For how long.
        down: f64,
    },
    /// `FLUSHALL` at `at`.
    Flush {
        /// When.
        at: f64,
    },
    /// `CLIENT PAUSE` for `pause` seconds at `at`.
    Pause {
        /// When.
        at: f64,
        /// For how long.
        pause: f64,
    },
}

/// Why a fault cannot be given or injected, naming the flag's value or the Redis at fault.
#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    /// A `--fault` value of no known form.
    #[error("--fault: {0:?} is not kill@T+D, flush@T or pause@T+D (seconds)")]
    Syntax(String),
    /// A kill or pause of no length.
    #[error("--fault: {0:?} lasts no time; give D > 0")]
    NoLength(String),
    /// No loopback port for the run's own Redis.
    #[error("no free loopback port for a Redis of the run's own: {0}")]
    NoPort(std::io::Error),
    /// The run's own Redis does not start.
    #[error("cannot start redis-server (a fault needs a Redis of the run's own): {0}")]
    Start(std::io::Error),
    /// The killed Redis does not start again.
    #[error("--fault: cannot start redis-server again: {0}")]
    Restart(std::io::Error),
    /// A command to the run's own Redis failed.
    #[error("redis on port {port}: {problem}")]
    Command {
        /// Its port.
        port: u16,
        /// The I/O error or the error reply.
        problem: String,
    },
}

impl FromStr for Fault {
    type Err = FaultError;

    fn from_str(text: &str) -> Result<Self, FaultError> {
        let usage = || FaultError::Syntax(text.to_owned());
        let (kind, when) = text.split_once('@').ok_or_else(usage)?;
        let seconds = |v: &str| v.parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0).ok_or_else(usage);
        let span = |v: &str| -> Result<(f64, f64), FaultError> {
            let (at, length) = v.split_once('+').ok_or_else(usage)?;
            let length = seconds(length)?;
            if length == 0.0 {
                return Err(FaultError::NoLength(text.to_owned()));
            }
            Ok((seconds(at)?, length))
        };
        match kind {
            "kill" => span(when).map(|(at, down)| Fault::Kill { at, down }),
            "pause" => span(when).map(|(at, pause)| Fault::Pause { at, pause }),
            "flush" => Ok(Fault::Flush { at: seconds(when)? }),
            _ => Err(usage()),
        }
    }
}

impl Fault {
    /// When it starts, scenario seconds.
    pub fn at(self) -> f64 {
        match self {
            Fault::Kill { at, .. } | Fault::Flush { at } | Fault::Pause { at, .. } => at,
        }
    }

    /// When Redis is whole again, scenario seconds (a flush: at once).
    pub fn ends(self) -> f64 {
        match self {
            Fault::Kill { at, down } => at + down,
            Fault::Pause { at, pause } => at + pause,
            Fault::Flush { at } => at,
        }
    }

    /// As written on the command line.
    pub fn label(self) -> String {
        match self {
            Fault::Kill { at, down } => format!("kill@{at}+{down}"),
            Fault::Flush { at } => format!("flush@{at}"),
            Fault::Pause { at, pause } => format!("pause@{at}+{pause}"),
        }
    }

    /// Injects the fault into `redis` on this (blocking) thread: waits for the run's start on
    /// `run` (a message), then `scale` real seconds per scenario second. Whether it was injected:
    /// not when the run ended first (`run` closed).
    pub fn inject(self, redis: &mut OwnRedis, scale: f64, run: &Receiver<()>) -> Result<bool, FaultError> {
        let real = |s: f64| Duration::from_secs_f64(s * scale);
        // Until the run starts, then until the fault's time, unless the run ends first.
        if run.recv().is_err() {
            return Ok(false);
        }
        let ended = |wait: Duration| !matches!(run.recv_timeout(wait), Err(RecvTimeoutError::Timeout));
        if ended(real(self.at())) {
            return Ok(false);
        }
        match self {
            Fault::Kill { down, .. } => {
                redis.stop();
                // Started again even when the run ends meanwhile: its last reads need Redis.
                let _ = ended(real(down));
                redis.spawn().map_err(FaultError::Restart)?;
            }
            Fault::Flush { .. } => drop(redis.command(&["FLUSHALL"])?),
            Fault::Pause { pause, .. } => {
                let ms = real(pause).as_millis().max(1).to_string();
                drop(redis.command(&["CLIENT", "PAUSE", &ms])?);
            }
        }
        Ok(true)
    }
}

/// A redis-server child process on a free loopback port, nothing persisted; killed on drop.
pub struct OwnRedis {
    port: u16,
    child: Option<Child>,
}

impl OwnRedis {
    /// Starts one and waits (bounded) until it answers.
    pub fn start() -> Result<OwnRedis, FaultError> {
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(FaultError::NoPort)?.port();
        let mut redis = OwnRedis { port, child: None };
        redis.spawn().map_err(FaultError::Start)?;
        Ok(redis)
    }

    /// Starts the server process (again) on the port and waits until it answers.
    pub fn spawn(&mut self) -> std::io::Result<()> {
        let port = self.port.to_string();
        let child = Command::new("redis-server")
            .args(["--port", &port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        for _ in 0..250 {
            if self.command(&["PING"]).is_ok_and(|reply| reply.starts_with("+PONG")) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(std::io::Error::other(format!("redis-server on port {port} did not answer within 5 s")))
    }

    /// Kills the server process.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Sends one command and returns the first line of the reply (`+OK`, `-ERR …`).
    pub fn command(&self, words: &[&str]) -> Result<String, FaultError> {
        let fail = |e: std::io::Error| FaultError::Command { port: self.port, problem: e.to_string() };
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).map_err(fail)?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).map_err(fail)?;
        let mut request = format!("*{}\r\n", words.len());
        for word in words {
            request.push_str(&format!("${}\r\n{word}\r\n", word.len()));
        }
        stream.write_all(request.as_bytes()).map_err(fail)?;
        let mut reply = [0u8; 256];
        let n = stream.read(&mut reply).map_err(fail)?;
        let line = String::from_utf8_lossy(&reply[..n]).lines().next().unwrap_or_default().to_owned();
        if line.starts_with('-') { Err(FaultError::Command { port: self.port, problem: line }) } else { Ok(line) }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_and_name_what_is_wrong() {
        assert_eq!("kill@60+5".parse::<Fault>().unwrap(), Fault::Kill { at: 60.0, down: 5.0 });
        assert_eq!("flush@60".parse::<Fault>().unwrap(), Fault::Flush { at: 60.0 });
        assert_eq!("pause@1.5+3".parse::<Fault>().unwrap(), Fault::Pause { at: 1.5, pause: 3.0 });
        assert_eq!(Fault::Kill { at: 60.0, down: 5.0 }.ends(), 65.0);
        assert_eq!(Fault::Kill { at: 60.0, down: 5.0 }.label(), "kill@60+5");
        for bad in ["kill@60", "kill60+5", "melt@60", "flush@soon", "pause@-1+3", "kill@60+x"] {
            let e = bad.parse::<Fault>().unwrap_err();
            assert_eq!(e.to_string(), format!("--fault: {bad:?} is not kill@T+D, flush@T or pause@T+D (seconds)"), "{bad}");
        }
        assert_eq!("kill@60+0".parse::<Fault>().unwrap_err().to_string(), "--fault: \"kill@60+0\" lasts no time; give D > 0");
    }
}
