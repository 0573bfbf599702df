//! Capacity freed in another process (SPEC §6: a release made elsewhere wakes a waiter too).
//! The settle script hands what a release frees to the process whose waiter is the oldest in
//! its scope's line across processes, publishing that process's line id on the scope's channel
//! (`gw:{<scope>}:freed`, the scope's hash tag); with nobody in that line, nobody is told (a
//! waiter for capacity stands in it from its first refusal on). Each process keeps one subscriber
//! connection on the pattern of every scope's channel and hands the scope of each message meant
//! for it to its callback (the client's `capacity_freed`, which wakes the head of that scope's
//! line). A message lost (a reconnect, a subscriber that fell behind) costs a waiter one poll.

use crate::connection::RedisConnection;
use crate::keys;
use fred::prelude::*;

/// The pattern every scope's channel matches.
const PATTERN: &str = "gw:{*}:freed";

/// Watches the channels of every scope on the Redis of `conn` on a task of its own, connecting
/// as `conn` did, reconnecting and subscribing again by its policy, and calls `on_freed` with the
/// scope of each message for `conn`'s process (its line id). The task ends
/// with the runtime.
pub fn watch_freed(conn: &RedisConnection, on_freed: impl Fn(&str) + Send + Sync + 'static) -> tokio::task::JoinHandle<()> {
    let config = conn.config();
    let (url, connect_timeout, policy) = (config.url.clone(), config.connect_timeout, config.reconnect_policy());
    let me = conn.line_id().clone();
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
                    let to = message.value.as_str();
                    let for_me = to.as_deref().is_some_and(|to| to == &*me);
                    if for_me && let Some(scope) = keys::freed_scope(&message.channel) {
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
