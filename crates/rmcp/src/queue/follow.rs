//! A stream's committed head as its queue publishes it, and the readers
//! that follow it (the request-stream gate, a store waiting for its commit).

use std::sync::Arc;

use mcp_resume_log::Seq;
use tokio::sync::watch;

/// The stream's committed head, or why nothing more will be.
#[derive(Clone)]
pub(crate) struct Committed {
    pub(super) head: Seq,
    pub(super) failed: Option<Arc<str>>,
}

/// One stream's committed head, followed (see [`super::Queues::follow`]): it
/// stays readable after the queue has gone from the map.
#[derive(Clone)]
pub(crate) struct Follow(pub(super) watch::Receiver<Committed>);

impl Follow {
    /// Whether event `seq` is committed.
    pub(crate) fn has(&self, seq: Seq) -> bool {
        self.0.borrow().head >= seq
    }

    /// Waits until event `seq` is committed; the reason where it never
    /// will be.
    pub(crate) async fn wait(mut self, seq: Seq) -> Result<(), String> {
        let c = self
            .0
            .wait_for(|c| c.head >= seq || c.failed.is_some())
            .await
            .map_err(|_| "the queue was dropped".to_owned())?;
        match &c.failed {
            Some(why) if c.head < seq => Err(why.to_string()),
            _ => Ok(()),
        }
    }
}
