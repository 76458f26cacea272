//! The bell that wakes an inbox: push, not polling, between instances.
//!
//! A message forwarded to another instance is carried by a request stream's
//! record (`inbox.rs`); this is how its receiver learns of it at once.
//! Every instance of a shared log that runs routes follows one log session
//! of its own, its **inbox bell** (`inbox.INSTANCE`, never a client's
//! session: client ids are 64 hex digits); whoever forwards a message for
//! session `S` to instance `I` appends `{"s": S}` to `I`'s bell. Its
//! follower wakes the watcher of `S` ([`Bells::waker`]), which reads the
//! records it has not read yet. One subscription per instance, whatever the
//! number of sessions: an idle session costs no command at all.
//!
//! Nothing depends on a bell being heard: a watcher reads every record
//! after the last one it read, so one ring wakes it for everything since;
//! when the follower loses its subscription (a lag, a lost connection) it
//! follows again and wakes every watcher. A bell for this instance itself
//! (a log of one process, or a message that reached the owner's own
//! instance after its route was replaced) rings in memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use mcp_resume_log::{Log, LogError, StreamKey};
use serde_json::{json, Value};
use tokio::sync::{Notify, OnceCell};

/// The bell session of `instance`.
pub(crate) fn bell_of(instance: &str) -> String {
    format!("inbox.{instance}")
}

/// This instance's bell: the wakers of its watchers, by session. Each
/// watcher has a waker of its own (a session may have two for a moment: a
/// route whose lease lapsed and its successor), so one that stops never
/// takes another's away.
#[derive(Default)]
pub(crate) struct Bells {
    wakers: Mutex<HashMap<String, Vec<Arc<Notify>>>>,
    /// Set once the bell session exists and is followed (shared logs).
    followed: OnceCell<()>,
}

impl Bells {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Arc<Notify>>>> {
        self.wakers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A waker for a new watcher of `session`; a ring stores a permit, so
    /// one that comes while the watcher reads is not lost.
    pub(crate) fn waker(&self, session: &str) -> Arc<Notify> {
        let n = Arc::new(Notify::new());
        self.lock()
            .entry(session.to_owned())
            .or_default()
            .push(n.clone());
        n
    }

    /// The watcher with `waker` stopped: forget its waker (only its own).
    pub(crate) fn forget(&self, session: &str, waker: &Arc<Notify>) {
        let mut w = self.lock();
        if let Some(list) = w.get_mut(session) {
            list.retain(|n| !Arc::ptr_eq(n, waker));
            if list.is_empty() {
                w.remove(session);
            }
        }
    }

    /// Wakes every watcher of `session` here.
    pub(crate) fn wake(&self, session: &str) {
        if let Some(list) = self.lock().get(session) {
            for n in list {
                n.notify_one();
            }
        }
    }

    fn wake_all(&self) {
        for n in self.lock().values().flatten() {
            n.notify_one();
        }
    }

    /// Creates this instance's bell session and follows it, once; a log of
    /// one process needs none (every bell rings in memory). Called before
    /// this instance can be named as a session's owner or send a server
    /// request, so no ring can come before the bell is followed.
    /// `touch_every`: how often the follower marks the bell session as used,
    /// well within the session TTL, so idle expiry never ends it while this
    /// instance lives.
    pub(crate) async fn open(
        self: &Arc<Self>,
        log: &Arc<dyn Log>,
        touch_every: Duration,
    ) -> Result<(), LogError> {
        if !log.shared() {
            return Ok(());
        }
        self.followed
            .get_or_try_init(|| async {
                let bell = bell_of(log.instance());
                match log.create_session(&bell, Bytes::from_static(b"{}")).await {
                    Ok(()) | Err(LogError::SessionExists(_)) => {}
                    Err(e) => return Err(e),
                }
                let (_, sub) = log.subscribe(&bell, StreamKey::Session).await?;
                let bells = Arc::downgrade(self);
                tokio::spawn(follow(bells, log.clone(), bell, sub, touch_every));
                Ok(())
            })
            .await
            .map(|_| ())
    }
}

/// Rings `instance`'s bell for `session`: in memory when it is this
/// instance, else through the log.
pub(crate) async fn ring(
    bells: &Bells,
    log: &dyn Log,
    instance: &str,
    session: &str,
) -> Result<(), LogError> {
    if instance == log.instance() || !log.shared() {
        bells.wake(session);
        return Ok(());
    }
    let ring = Bytes::from(json!({ "s": session }).to_string());
    log.append(&bell_of(instance), StreamKey::Session, vec![ring])
        .await?;
    Ok(())
}

/// Follows this instance's bell until the server drops its routes: each
/// ring wakes its session's watcher; a lost subscription is taken again,
/// and then every watcher is woken.
async fn follow(
    bells: std::sync::Weak<Bells>,
    log: Arc<dyn Log>,
    bell: String,
    mut sub: mcp_resume_log::Subscription,
    touch_every: Duration,
) {
    let mut touch = tokio::time::interval(touch_every);
    loop {
        let next = tokio::select! {
            next = sub.next() => next,
            _ = touch.tick() => {
                if let Err(e) = log.touch(&bell).await {
                    tracing::debug!(%bell, error = %e, "could not mark the inbox bell as used");
                }
                continue;
            }
        };
        let Some(bells) = bells.upgrade() else { return };
        match next {
            Ok(ev) => {
                let session = serde_json::from_slice::<Value>(&ev.message)
                    .ok()
                    .and_then(|v| v.get("s").and_then(Value::as_str).map(str::to_owned));
                if let Some(session) = session {
                    bells.wake(&session);
                }
            }
            Err(LogError::Closed) => return,
            Err(e) => {
                tracing::debug!(%bell, error = %e, "following the inbox bell again");
                tokio::time::sleep(Duration::from_millis(200)).await;
                match log.subscribe(&bell, StreamKey::Session).await {
                    Ok((_, again)) => sub = again,
                    Err(e) => {
                        tracing::warn!(%bell, error = %e, "could not follow the inbox bell; trying again");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
                // Whatever rang meanwhile: every watcher reads.
                bells.wake_all();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A route whose lease lapsed and its successor watch one session for a
    /// moment: the first one stopping must not take the second's waker away
    /// (a ring for the session was then lost for good: a forwarded call
    /// never read, seen under load in gateway_fence).
    #[tokio::test]
    async fn a_watcher_that_stops_leaves_the_next_ones_waker() {
        let bells = Bells::default();
        let old = bells.waker("s");
        let new = bells.waker("s");
        bells.forget("s", &old);
        bells.wake("s");
        tokio::time::timeout(Duration::from_secs(1), new.notified())
            .await
            .expect("the remaining watcher is woken");
        // Every watcher of a session is woken, and a ring while none waits
        // is kept as a permit.
        let other = bells.waker("s");
        bells.wake("s");
        for n in [&new, &other] {
            tokio::time::timeout(Duration::from_secs(1), n.notified())
                .await
                .expect("each watcher is woken");
        }
        bells.forget("s", &new);
        bells.forget("s", &other);
        assert!(bells.lock().is_empty());
    }
}
