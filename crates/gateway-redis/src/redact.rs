//! Credentials never reach logs or errors: a Redis URL as it may be shown.

/// `redis://user:secret@host` → `redis://host`, and a Sentinel URL's
/// `sentinelPassword=secret` → `sentinelPassword=***`: credentials never reach logs or errors.
pub(crate) fn redact(url: &str) -> String {
    let url = match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}{}", &url[..scheme + 3], &url[at + 1..]),
        _ => url.to_owned(),
    };
    const SENTINEL_PASSWORD: &str = "sentinelPassword=";
    match url.find(SENTINEL_PASSWORD) {
        Some(at) => {
            let start = at + SENTINEL_PASSWORD.len();
            let end = url[start..].find('&').map_or(url.len(), |len| start + len);
            format!("{}***{}", &url[..start], &url[end..])
        }
        None => url,
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn credentials_are_redacted() {
        assert_eq!(redact("redis://user:hunter2@10.0.0.1:6379/0"), "redis://10.0.0.1:6379/0");
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(
            redact("redis-cluster://:pw@127.0.0.1:7001?node=127.0.0.1:7002&node=127.0.0.1:7003"),
            "redis-cluster://127.0.0.1:7001?node=127.0.0.1:7002&node=127.0.0.1:7003"
        );
        assert_eq!(
            redact("redis-sentinel://u:pw@s1:26379/0?sentinelServiceName=gw&sentinelPassword=hunter2&node=s2:26379"),
            "redis-sentinel://s1:26379/0?sentinelServiceName=gw&sentinelPassword=***&node=s2:26379"
        );
    }
}
