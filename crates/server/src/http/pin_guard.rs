//! A retention pin held for the time of a WebSocket upgrade
//! (docs/protocol.md 5.2): released on every path out, by drop if nothing
//! released it before, so that no refusal, failed upgrade or panic leaves
//! the stream pinned until the pin's deadline.

use mcp_resume_log::PinId;

use crate::route::state::AppState;

/// Holds pin `pin` of session `id`'s stream until [`PinGuard::release`] or drop.
pub(super) struct PinGuard {
    state: AppState,
    id: String,
    pin: Option<PinId>,
}

impl PinGuard {
    /// Guards `pin` (none: nothing to release, as in the legacy upgrade).
    pub(super) fn new(state: &AppState, id: &str, pin: Option<PinId>) -> Self {
        Self {
            state: state.clone(),
            id: id.to_owned(),
            pin,
        }
    }

    /// Releases the pin now, waiting for the log.
    pub(super) async fn release(&mut self) {
        if let Some(pin) = self.pin.take() {
            let _ = self.state.log.unpin(&self.id, pin).await;
        }
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        if let Some(pin) = self.pin.take() {
            let (state, id) = (self.state.clone(), std::mem::take(&mut self.id));
            self.state.spawn(async move {
                let _ = state.log.unpin(&id, pin).await;
            });
        }
    }
}
