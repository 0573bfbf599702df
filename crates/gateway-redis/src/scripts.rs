//! The Lua scripts, one per operation: the shared clock (`now.lua`), an optional fast path for
//! the operation's hottest case, a shared prelude (`gate.lua`, `quota.lua`, `pacer.lua`), then the
//! operation's body; with the SHA1 each is called by.

use fred::util::sha1_hash;

/// One operation's script.
pub(crate) struct Script {
    pub(crate) name: &'static str,
    pub(crate) lua: String,
    pub(crate) sha: String,
}

impl Script {
    fn new(name: &'static str, prelude: &str, body: &str) -> Self {
        Script::with_fast_path(name, "", prelude, body)
    }

    /// `fast` runs first (after `now.lua`) and returns early for the common case, before the
    /// prelude's setup.
    fn with_fast_path(name: &'static str, fast: &str, prelude: &str, body: &str) -> Self {
        let lua = format!("{}\n{fast}\n{prelude}\n{body}", include_str!("../lua/now.lua"));
        let sha = sha1_hash(&lua);
        Script { name, lua, sha }
    }
}

/// Every script of the crate.
pub(crate) struct Scripts {
    pub(crate) try_enter: Script,
    pub(crate) record_success: Script,
    pub(crate) record_failure: Script,
    pub(crate) force_open: Script,
    pub(crate) release_probe: Script,
    pub(crate) retry_after: Script,
    pub(crate) quota_acquire: Script,
    pub(crate) quota_settle: Script,
    pub(crate) quota_release: Script,
    pub(crate) pacer_acquire: Script,
    pub(crate) pacer_release: Script,
    pub(crate) pacer_read: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let gate = include_str!("../lua/gate.lua");
        let quota = include_str!("../lua/quota.lua");
        let pacer = include_str!("../lua/pacer.lua");
        Scripts {
            try_enter: Script::with_fast_path(
                "try_enter",
                include_str!("../lua/try_enter_fast.lua"),
                gate,
                include_str!("../lua/try_enter.lua"),
            ),
            record_success: Script::with_fast_path(
                "record_success",
                include_str!("../lua/record_success_fast.lua"),
                gate,
                include_str!("../lua/record_success.lua"),
            ),
            record_failure: Script::with_fast_path(
                "record_failure",
                include_str!("../lua/record_failure_fast.lua"),
                gate,
                include_str!("../lua/record_failure.lua"),
            ),
            force_open: Script::new("force_open", gate, include_str!("../lua/force_open.lua")),
            release_probe: Script::new("release_probe", gate, include_str!("../lua/release_probe.lua")),
            retry_after: Script::new("retry_after", "", include_str!("../lua/retry_after.lua")),
            quota_acquire: Script::new("quota_acquire", quota, include_str!("../lua/quota_acquire.lua")),
            quota_settle: Script::new("quota_settle", quota, include_str!("../lua/quota_settle.lua")),
            quota_release: Script::new("quota_release", quota, include_str!("../lua/quota_release.lua")),
            pacer_acquire: Script::new("pacer_acquire", pacer, include_str!("../lua/pacer_acquire.lua")),
            pacer_release: Script::new("pacer_release", pacer, include_str!("../lua/pacer_release.lua")),
            pacer_read: Script::new("pacer_read", pacer, include_str!("../lua/pacer_read.lua")),
        }
    }

    pub(crate) fn all(&self) -> [&Script; 12] {
        [
            &self.try_enter,
            &self.record_success,
            &self.record_failure,
            &self.force_open,
            &self.release_probe,
            &self.retry_after,
            &self.quota_acquire,
            &self.quota_settle,
            &self.quota_release,
            &self.pacer_acquire,
            &self.pacer_release,
            &self.pacer_read,
        ]
    }
}
