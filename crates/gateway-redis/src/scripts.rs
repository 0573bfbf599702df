//! The Lua scripts: the shared clock and retry_after rule (`now.lua`), a shared prelude
//! (`quota.lua`, `pacer.lua`) where several operations share one, then the body; with the SHA1
//! each is called by; `admit` runs an attempt's admission, `settle` its records, each in one
//! (their bodies open with `parts.lua`), and `handover` an ended attempt's records, then the
//! next waiter's admission, in one. Every breaker operation is one script, `gate.lua`, as
//! every one is `Gate::apply` in gateway-core.

use fred::util::sha1_hash;

/// One operation's script.
pub(crate) struct Script {
    pub(crate) name: &'static str,
    pub(crate) lua: String,
    pub(crate) sha: String,
    /// The SHA1 as the EVALSHA argument, built once.
    pub(crate) sha_arg: fred::types::Value,
}

/// One operation's script: its name (a function's, as a part of a combined script), its prelude
/// and its body.
type Part = (&'static str, &'static str, &'static str);

impl Script {
    fn new((name, prelude, body): Part) -> Self {
        Self::named(name, format!("{}\n{prelude}\n{body}", include_str!("../lua/now.lua")))
    }

    fn named(name: &'static str, lua: String) -> Self {
        let sha = sha1_hash(&lua);
        let sha_arg = fred::types::Value::String(sha.as_str().into());
        Script { name, lua, sha, sha_arg }
    }

    /// A script that runs other scripts' operations in one: each of `parts` (a function name,
    /// and a script's prelude and body) becomes a local function of its own `KEYS` and `ARGV`,
    /// the whole script it is on its own, and `body` calls them, reading their keys and
    /// arguments with `parts.lua`.
    fn combined(name: &'static str, parts: &[Part], body: &str) -> Self {
        let mut lua = String::new();
        for (function, prelude, part) in parts {
            lua.push_str(&format!("local function {function}(KEYS, ARGV)\n{}\n{prelude}\n{part}\nend\n", include_str!("../lua/now.lua")));
        }
        lua.push_str(&format!("{}\n{}\n{body}", include_str!("../lua/now.lua"), include_str!("../lua/parts.lua")));
        Self::named(name, lua)
    }
}

/// Every script of the crate.
pub(crate) struct Scripts {
    pub(crate) gate: Script,
    pub(crate) retry_after: Script,
    pub(crate) quota_acquire: Script,
    pub(crate) quota_settle: Script,
    pub(crate) quota_release: Script,
    pub(crate) pacer_acquire: Script,
    pub(crate) pacer_release: Script,
    pub(crate) pacer_read: Script,
    /// The line across processes on its own: capacity a told process has nobody for, passed on.
    pub(crate) line: Script,
    /// An attempt's admission in one: the account's place, the gate, the permit (each refusal
    /// handing back what was taken before it).
    pub(crate) admit: Script,
    /// An attempt's records in one: the pacer release, the gate's record, the permit's settle
    /// and release.
    pub(crate) settle: Script,
    /// An attempt's records, then the next waiter's admission, in one (`settle`'s body, then
    /// `admit`'s).
    pub(crate) handover: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let quota = include_str!("../lua/quota.lua");
        let pacer = include_str!("../lua/pacer.lua");
        // Each operation's script, on its own and as a part of the combined ones.
        let gate: Part = ("gate", "", include_str!("../lua/gate.lua"));
        let line = ("line", "", include_str!("../lua/line.lua"));
        let quota_acquire = ("quota_acquire", quota, include_str!("../lua/quota_acquire.lua"));
        let quota_settle = ("quota_settle", quota, include_str!("../lua/quota_settle.lua"));
        let quota_release = ("quota_release", quota, include_str!("../lua/quota_release.lua"));
        let pacer_acquire = ("pacer_acquire", pacer, include_str!("../lua/pacer_acquire.lua"));
        let pacer_release = ("pacer_release", pacer, include_str!("../lua/pacer_release.lua"));
        let (admit, settle) = (include_str!("../lua/admit.lua"), include_str!("../lua/settle.lua"));
        Scripts {
            gate: Script::new(gate),
            retry_after: Script::new(("retry_after", "", include_str!("../lua/retry_after.lua"))),
            quota_acquire: Script::new(quota_acquire),
            quota_settle: Script::new(quota_settle),
            quota_release: Script::new(quota_release),
            pacer_acquire: Script::new(pacer_acquire),
            pacer_release: Script::new(pacer_release),
            pacer_read: Script::new(("pacer_read", pacer, include_str!("../lua/pacer_read.lua"))),
            line: Script::new(line),
            admit: Script::combined("admit", &[pacer_acquire, pacer_release, gate, quota_acquire, line], admit),
            settle: Script::combined("settle", &[pacer_release, gate, quota_settle, quota_release, line], settle),
            handover: Script::combined(
                "handover",
                &[pacer_acquire, pacer_release, gate, quota_acquire, quota_settle, quota_release, line],
                &format!(
                    "local function settled()\n{settle}\nend\nlocal function admitted()\n{admit}\nend\n{}",
                    include_str!("../lua/handover.lua")
                ),
            ),
        }
    }

    pub(crate) fn all(&self) -> [&Script; 12] {
        [
            &self.gate,
            &self.retry_after,
            &self.quota_acquire,
            &self.quota_settle,
            &self.quota_release,
            &self.pacer_acquire,
            &self.pacer_release,
            &self.pacer_read,
            &self.line,
            &self.admit,
            &self.settle,
            &self.handover,
        ]
    }
}
