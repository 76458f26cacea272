//! How a stream's queue ends when its flush cannot finish its work, and
//! what stays of the streams of a closed session: both so that a store
//! fails loudly instead of waiting forever or being numbered twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Queue;

/// How long a closed session's request streams are remembered: longer than
/// rmcp's worker takes to stop after the close.
const CLOSED_FOR: Duration = Duration::from_secs(60);

/// Fails its stream if the flush is dropped before it finished (a log
/// backend that panicked, a runtime that stopped): the stream's stores and
/// the readers waiting for its commits get the failure instead of waiting
/// for a commit that never comes.
pub(super) struct FailOnDrop {
    map: Arc<Mutex<HashMap<String, Arc<Queue>>>>,
    queue: Arc<Queue>,
    armed: bool,
}

impl FailOnDrop {
    /// Armed until [`FailOnDrop::disarm`]. It holds the queue map, not the
    /// log: a flush that committed everything lets go of the log first.
    pub(super) fn new(map: Arc<Mutex<HashMap<String, Arc<Queue>>>>, queue: Arc<Queue>) -> Self {
        Self {
            map,
            queue,
            armed: true,
        }
    }

    /// The flush finished its work.
    pub(super) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for FailOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let why = "the flush of this stream stopped before committing it (the log panicked, or the runtime stopped)";
        fail(&self.map, &self.queue, why.into());
    }
}

/// Fails `queue` for good with `why`: published before the flush ends, so
/// no store slips in between. A failed stream stays in `map` (it is never
/// numbered again from its start) until its writer has ended it.
pub(super) fn fail(map: &Mutex<HashMap<String, Arc<Queue>>>, queue: &Arc<Queue>, why: Arc<str>) {
    tracing::error!(stream = %queue.loc.session, %why, "rmcp events were not committed; the stream fails");
    queue.committed.send_modify(|c| c.failed = Some(why));
    let mut st = queue.state.lock().unwrap_or_else(|e| e.into_inner());
    st.failed = true;
    st.pending.clear();
    st.flushing = false;
    let retired = st.ended;
    drop(st);
    if retired {
        remove(map, queue);
    }
}

/// Drops `queue` from `map` if it is still the one there.
pub(super) fn remove(map: &Mutex<HashMap<String, Arc<Queue>>>, queue: &Arc<Queue>) {
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    if map
        .get(&queue.loc.session)
        .is_some_and(|q| Arc::ptr_eq(q, queue))
    {
        map.remove(&queue.loc.session);
    }
}

/// The request streams of closed sessions, for [`CLOSED_FOR`]: a store to
/// one is refused ("its session closed") instead of opening a queue that
/// numbers the stream from 1 again.
#[derive(Default)]
pub(super) struct Closed(Mutex<HashMap<String, Instant>>);

impl Closed {
    /// Remembers `streams`, and forgets those remembered long enough.
    pub(super) fn add(&self, streams: Vec<String>) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|_, at| at.elapsed() < CLOSED_FOR);
        let now = Instant::now();
        m.extend(streams.into_iter().map(|s| (s, now)));
    }

    /// Whether `stream` belongs to a session that closed.
    pub(super) fn has(&self, stream: &str) -> bool {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.get(stream).is_some_and(|at| at.elapsed() < CLOSED_FOR)
    }
}
