//! The Lua scripts, one per operation: a shared prelude (`gate.lua`, `quota.lua`) followed by
//! the operation's body, with the SHA1 each is called by.

use fred::util::sha1_hash;

/// One operation's script.
pub(crate) struct Script {
    pub(crate) name: &'static str,
    pub(crate) lua: String,
    pub(crate) sha: String,
}

impl Script {
    fn new(name: &'static str, prelude: &str, body: &str) -> Self {
        let lua = format!("{prelude}\n{body}");
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
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let gate = include_str!("../lua/gate.lua");
        let quota = include_str!("../lua/quota.lua");
        Scripts {
            try_enter: Script::new("try_enter", gate, include_str!("../lua/try_enter.lua")),
            record_success: Script::new("record_success", gate, include_str!("../lua/record_success.lua")),
            record_failure: Script::new("record_failure", gate, include_str!("../lua/record_failure.lua")),
            force_open: Script::new("force_open", gate, include_str!("../lua/force_open.lua")),
            release_probe: Script::new("release_probe", gate, include_str!("../lua/release_probe.lua")),
            retry_after: Script::new("retry_after", "", include_str!("../lua/retry_after.lua")),
            quota_acquire: Script::new("quota_acquire", quota, include_str!("../lua/quota_acquire.lua")),
            quota_settle: Script::new("quota_settle", quota, include_str!("../lua/quota_settle.lua")),
            quota_release: Script::new("quota_release", quota, include_str!("../lua/quota_release.lua")),
        }
    }

    pub(crate) fn all(&self) -> [&Script; 9] {
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
        ]
    }
}
