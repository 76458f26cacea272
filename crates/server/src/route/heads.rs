//! The heads (creator, revision, whether a task's) of sessions whose
//! requests reach this instance without their route: behind a balancer
//! with no stickiness most requests of a fleet do, and each read the
//! session's record from the log (a Redis round trip) only to check who may
//! use it. A head never changes for a session id, and the request's touch
//! still asks whether the session lives, so a remembered head is as good as
//! a read one.
//!
//! Bounded by two generations of [`GENERATION`] heads each: when the young
//! one fills, the old one is dropped and the young one becomes old, so the
//! sessions used lately stay and the memory is at most twice that. A
//! session ended here (its `DELETE`, or maintenance's idle expiry) is
//! forgotten at once; one ended on another instance is forgotten when a
//! request's touch finds it ended, else when its generation goes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::session::SessionHead;

/// Heads per generation.
const GENERATION: usize = 16_384;

/// The remembered heads.
#[derive(Default)]
pub(crate) struct Heads(Mutex<Generations>);

#[derive(Default)]
struct Generations {
    young: HashMap<String, Arc<SessionHead>>,
    old: HashMap<String, Arc<SessionHead>>,
}

impl Heads {
    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The head of `id`, if remembered (moved to the young generation).
    pub(crate) fn get(&self, id: &str) -> Option<Arc<SessionHead>> {
        let mut g = self.lock();
        if let Some(h) = g.young.get(id) {
            return Some(h.clone());
        }
        let h = g.old.remove(id)?;
        g.insert(id, h.clone());
        Some(h)
    }

    /// Remembers the head of `id`, as read from its record.
    pub(crate) fn put(&self, id: &str, head: Arc<SessionHead>) {
        self.lock().insert(id, head);
    }

    /// Forgets `id` (it ended).
    pub(crate) fn forget(&self, id: &str) {
        let mut g = self.lock();
        g.young.remove(id);
        g.old.remove(id);
    }
}

impl Generations {
    fn insert(&mut self, id: &str, head: Arc<SessionHead>) {
        if self.young.len() >= GENERATION {
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(id.to_owned(), head);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_bounded_by_two_generations_and_recent_ones_stay() {
        let heads = Heads::default();
        heads.put("kept", Arc::default());
        for i in 0..GENERATION * 3 {
            heads.put(&i.to_string(), Arc::default());
            if i % 1000 == 0 {
                assert!(heads.get("kept").is_some(), "a session in use stays");
            }
        }
        let g = heads.lock();
        assert!(g.young.len() + g.old.len() <= GENERATION * 2);
        drop(g);
        assert!(heads.get("0").is_none(), "the oldest went");
        heads.forget("kept");
        assert!(heads.get("kept").is_none());
    }
}
