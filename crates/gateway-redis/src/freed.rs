//! Capacity freed in another process (SPEC §6: a release made elsewhere wakes a waiter too).
//! The settle script hands what a release frees to the process whose waiter started first in
//! its scope's line across processes (`line.lua`), publishing on that process's channel of the
//! scope (`gw:{<scope>}:freed:<line id>`, the scope's hash tag); with nobody in that line,
//! nobody is told. Each process keeps one subscriber connection on the pattern of its own
//! channels, so that it hears only what is handed to it (a message is a wake-up), and hands the
//! scope of each message to its callback (the client's `capacity_freed`, which wakes the head of
//! that scope's line). A process told of capacity it has nobody for (its waiters left since it
//! last stood) leaves the line and passes the capacity on to the next process in it. A message
//! lost (a reconnect, a subscriber that fell behind) costs a waiter one poll.

use crate::connection::RedisConnection;
use crate::keys;
use fred::prelude::*;
use std::sync::Arc;

/// Watches the channels of `conn`'s process (its line id) in every scope on the Redis of `conn`
/// on a task of its own, connecting as `conn` did, reconnecting and subscribing again by its
/// policy, and calls `on_freed` with the scope of each message; `on_freed` answers whether it woke
/// a waiter, and when it did not the capacity is passed on. From this call on, `conn`'s process
/// stands in the lines it waits in. The task ends with the runtime.
pub fn watch_freed(conn: &Arc<RedisConnection>, on_freed: impl Fn(&str) -> bool + Send + Sync + 'static) -> tokio::task::JoinHandle<()> {
    let config = conn.config();
    let (config, policy) = (config.clone(), config.reconnect_policy());
    let conn = conn.clone();
    conn.mark_watched();
    tokio::spawn(async move {
        let subscriber = match Config::from_url(&config.url).and_then(|mut c| {
            // Not there yet: keep trying, by the policy (the first connection included).
            c.fail_fast = false;
            Builder::from_config(c).with_connection_config(|c| config.connection(c)).set_policy(policy).build_subscriber_client()
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
        if let Err(error) = subscriber.psubscribe(keys::freed_pattern(conn.line_id())).await {
            tracing::warn!(%error, "redis: the watch for capacity freed elsewhere subscribes when it reconnects");
        }
        loop {
            match messages.recv().await {
                Ok(message) => {
                    if let Some(scope) = keys::freed_scope(&message.channel, conn.line_id())
                        && !on_freed(scope)
                    {
                        pass_on(&conn, scope).await;
                    }
                }
                // Fell behind: the messages lost cost their waiters a poll.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    })
}

/// Capacity of `scope` handed to this process finds nobody waiting: it leaves the line and the
/// capacity goes to the next process in it (`line.lua`'s 'freed', nobody waiting here, no grace).
async fn pass_on(conn: &RedisConnection, scope: &str) {
    let keys = keys::line_of(scope).map(|k| Value::String(k.into()));
    let channel = Value::String(keys::freed_channels(scope).into());
    let args = [conn.now_arg(), Value::String("freed".into()), conn.line_arg(), Value::String("0".into()), channel, Value::Integer(0)];
    if let Err(error) = conn.run(&conn.scripts().line, &keys, &[&args], &scope).await {
        tracing::warn!(%error, scope, "redis: capacity handed to this process with nobody waiting was not passed on");
    }
}
