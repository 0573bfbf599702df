//! Redis key names: `gw:{<scope>}:gate:[<tenant>:]<source>`,
//! `gw:{<scope>}:quota:[<tenant>:]<source>:<part>` and
//! `gw:{<scope>}:pacer:[<tenant>:]<account>:<part>`. The scope is the hash tag, so one script may
//! touch several of a scope's keys on Redis Cluster. Key parts are restricted to the alphabet
//! config names use, so no part can break the tag or the separators.

use gateway_core::ports::{BackendError, SourceKey, is_key_part};

fn check(part: &str, what: &str, key: &SourceKey) -> Result<(), BackendError> {
    if is_key_part(part) {
        Ok(())
    } else {
        Err(BackendError::InvalidKey {
            key: key.to_string(),
            detail: format!("{what} {part:?} must use only letters, digits, '_' and '-'"),
        })
    }
}

fn base(key: &SourceKey, kind: &str) -> Result<String, BackendError> {
    check(&key.scope, "scope", key)?;
    check(&key.source, "source", key)?;
    Ok(match &key.tenant {
        Some(tenant) => {
            check(tenant, "tenant", key)?;
            format!("gw:{{{}}}:{kind}:{tenant}:{}", key.scope, key.source)
        }
        None => format!("gw:{{{}}}:{kind}:{}", key.scope, key.source),
    })
}

/// The HASH of one gate.
pub(crate) fn gate(key: &SourceKey) -> Result<String, BackendError> {
    base(key, "gate")
}

/// The four keys of one quota account: leases, starts, tokens, id sequence.
pub(crate) fn quota(key: &SourceKey) -> Result<[String; 4], BackendError> {
    let base = base(key, "quota")?;
    Ok([format!("{base}:leases"), format!("{base}:starts"), format!("{base}:tokens"), format!("{base}:seq")])
}

/// The two keys of `key`'s scope's line across processes: each process's oldest refused
/// waiter's start, and until when its standing lasts.
pub(crate) fn line(key: &SourceKey) -> Result<[String; 2], BackendError> {
    check(&key.scope, "scope", key)?;
    Ok(line_of(&key.scope))
}

/// The two keys of the line of `scope`, a checked key part.
pub(crate) fn line_of(scope: &str) -> [String; 2] {
    [format!("gw:{{{scope}}}:line"), format!("gw:{{{scope}}}:line:lasts")]
}

/// The channels on which a scope's releases tell one process that capacity is free: this
/// prefix, then the process's line id (`line.lua` adds it), so that each process hears only
/// what is handed to it.
pub(crate) fn freed_channels(scope: &str) -> String {
    format!("gw:{{{scope}}}:freed:")
}

/// The pattern of every scope's channel for the process `line_id`.
pub(crate) fn freed_pattern(line_id: &str) -> String {
    format!("gw:{{*}}:freed:{line_id}")
}

/// The scope of a channel of [`freed_channels`] for the process `line_id`, if `channel` is one.
pub(crate) fn freed_scope<'a>(channel: &'a str, line_id: &str) -> Option<&'a str> {
    let scope = channel.strip_prefix("gw:{")?.strip_suffix(line_id)?.strip_suffix("}:freed:")?;
    Some(scope).filter(|scope| is_key_part(scope))
}

/// The two keys of one account's pacer: state (limit, generation, lease sequence), leases.
pub(crate) fn pacer(key: &SourceKey) -> Result<[String; 2], BackendError> {
    let base = base(key, "pacer")?;
    Ok([format!("{base}:state"), format!("{base}:leases")])
}

/// A reply of Redis's that the script for `key` should not have given.
pub(crate) fn malformed(key: &SourceKey, detail: String) -> BackendError {
    BackendError::Malformed { backend: "redis", key: key.to_string(), detail }
}

/// Redis could not be asked about `key`.
pub(crate) fn unavailable(key: &SourceKey, e: fred::error::Error) -> BackendError {
    BackendError::BackendUnavailable { backend: "redis", key: key.to_string(), detail: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_is_the_hash_tag() {
        assert_eq!(gate(&SourceKey::new("chat", "s1")).unwrap(), "gw:{chat}:gate:s1");
        assert_eq!(gate(&SourceKey::new("chat", "s1").with_tenant("gold")).unwrap(), "gw:{chat}:gate:gold:s1");
        assert_eq!(quota(&SourceKey::new("chat", "s1")).unwrap()[3], "gw:{chat}:quota:s1:seq");
        assert_eq!(pacer(&SourceKey::new("chat", "k1").with_tenant("gold")).unwrap()[1], "gw:{chat}:pacer:gold:k1:leases");
        assert_eq!(line(&SourceKey::new("chat", "s1").with_tenant("gold")).unwrap(), ["gw:{chat}:line", "gw:{chat}:line:lasts"]);
    }

    #[test]
    fn a_freed_channel_names_its_scope_and_process_and_nothing_else_is_read_as_one() {
        let channel = format!("{}{}", freed_channels("chat"), "1f-00ab");
        assert_eq!(channel, "gw:{chat}:freed:1f-00ab");
        assert_eq!(freed_pattern("1f-00ab"), "gw:{*}:freed:1f-00ab");
        assert_eq!(freed_scope(&channel, "1f-00ab"), Some("chat"));
        assert_eq!(freed_scope(&channel, "2e-00ab"), None, "another process's");
        assert_eq!(freed_scope("gw:{chat}:gate", "1f-00ab"), None);
        assert_eq!(freed_scope("gw:{ch}at}:freed:1f-00ab", "1f-00ab"), None);
        assert_eq!(freed_scope("gw:{chat}:freed", "1f-00ab"), None, "the channel of before");
        assert_eq!(freed_scope("other", "1f-00ab"), None);
    }

    #[test]
    fn parts_that_could_break_the_key_are_refused() {
        let e = gate(&SourceKey::new("ch}at", "s1")).unwrap_err().to_string();
        assert_eq!(e, "invalid gate key ch}at/s1: scope \"ch}at\" must use only letters, digits, '_' and '-'");
        assert!(gate(&SourceKey::new("chat", "a:b")).is_err());
        assert!(quota(&SourceKey::new("chat", "s1").with_tenant("")).is_err());
    }
}
