//! Capacity freed in another process (SPEC §6: a release made elsewhere wakes a waiter too).
//! The settle script publishes on its scope's channel (`gw:{<scope>}:freed`, the scope's hash
//! tag) when the releasing process had nobody waiting, so its place and permit are free for
//! another's waiters; each process keeps one subscriber connection on the pattern of every
//! scope's channel and hands the scope named to its callback (the client's `capacity_freed`,
//! which wakes the head of that scope's line). A message lost (a reconnect, a subscriber that
//! fell behind) costs a waiter one poll.

use crate::connection::RedisConfig;
use crate::keys;
use fred::prelude::*;
use fred::types::config::ReconnectPolicy;

/// The pattern every scope's channel matches.
const PATTERN: &str = "gw:{*}:freed";

/// Watches the channels of every scope on the Redis of `config` on a task of its own,
/// reconnecting and subscribing again as the pool does, and calls `on_freed` with the scope of
/// each message. The task ends with the runtime.
pub fn watch_freed(config: &RedisConfig, on_freed: impl Fn(&str) + Send + Sync + 'static) -> tokio::task::JoinHandle<()> {
    let (url, connect_timeout) = (config.url.clone(), config.connect_timeout);
    let policy = ReconnectPolicy::new_exponential(0, 100, 5_000, 2);
    tokio::spawn(async move {
        let subscriber = match Config::from_url(&url).and_then(|mut c| {
            // Not there yet: keep trying, by the policy (the first connection included).
            c.fail_fast = false;
            Builder::from_config(c)
                .with_connection_config(|c| c.connection_timeout = connect_timeout)
                .set_policy(policy)
                .build_subscriber_client()
        }) {
            Ok(subscriber) => subscriber,
            Err(error) => {
                tracing::error!(%error, "redis: cannot watch for capacity freed elsewhere; waiters rely on their poll");
                return;
            }
        };
        let mut messages = subscriber.message_rx();
        // Reconnects and subscribes again for as long as the runtime lives.
        let _resubscribe = subscriber.manage_subscriptions();
        let _connection = subscriber.init().await;
        if let Err(error) = subscriber.psubscribe(PATTERN).await {
            tracing::warn!(%error, "redis: the watch for capacity freed elsewhere subscribes when it reconnects");
        }
        loop {
            match messages.recv().await {
                Ok(message) => {
                    if let Some(scope) = keys::freed_scope(&message.channel) {
                        on_freed(scope);
                    }
                }
                // Fell behind: the messages lost cost their waiters a poll.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    })
}
