//! Retention pins that outlive a restart (docs/protocol.md 5.2 and 6.1).
//!
//! An upgrade pins the first event its reader still needs until its ack or
//! the upgrade timeout. The hub keeps pins in memory; the disk log also
//! commits each one (`pins`: `id 0 pin -> stream | seq | until_ms`), so a
//! process that comes back within the timeout still protects that range.

use std::time::{Duration, Instant};

use fjall::PersistMode;

use super::store::{session_prefix, split_key, storage, stream_key, u64_at, Store};
use crate::hub::Hub;
use crate::types::now_ms;
use crate::{LogError, PinId, Seq, StreamKey};

/// A pin's key: the session's prefix and the pin's number.
pub(super) fn pin_key(id: &str, pin: PinId) -> Vec<u8> {
    stream_key(id, pin.0)
}

/// A pin's value: its stream, the first seq it protects, and until when (ms).
pub(super) fn pin_value(stream: StreamKey, seq: Seq, until_ms: u64) -> [u8; 24] {
    let mut v = [0u8; 24];
    v[..8].copy_from_slice(&stream.number().to_be_bytes());
    v[8..16].copy_from_slice(&seq.to_be_bytes());
    v[16..].copy_from_slice(&until_ms.to_be_bytes());
    v
}

/// Puts the pins that are still in time back into the hub, and removes the
/// others (and any of a session that is gone) from storage.
pub(super) fn load_pins(store: &Store, hub: &Hub) -> Result<(), LogError> {
    let now = now_ms();
    let mut stale = Vec::new();
    for kv in store.pins.iter() {
        let (k, v) = kv.into_inner().map_err(storage)?;
        let parsed = split_key(&k)
            .and_then(|(id, pin)| Some((id, pin, u64_at(&v, 0)?, u64_at(&v, 8)?, u64_at(&v, 16)?)));
        match parsed {
            Some((id, pin, stream, seq, until_ms)) if until_ms > now && hub.cell(id).is_ok() => {
                let until = Instant::now() + Duration::from_millis(until_ms - now);
                hub.restore_pin(id, StreamKey::from_number(stream), seq, until, PinId(pin));
            }
            _ => stale.push(k.to_vec()),
        }
    }
    if !stale.is_empty() {
        let mut wb = store.db.batch().durability(Some(PersistMode::SyncAll));
        for k in stale {
            wb.remove(&store.pins, k);
        }
        wb.commit().map_err(storage)?;
    }
    Ok(())
}

/// Every stored pin key of session `id`, to remove with it.
pub(super) fn pins_of(store: &Store, id: &str) -> Vec<Vec<u8>> {
    store
        .pins
        .prefix(session_prefix(id))
        .filter_map(|kv| kv.key().ok().map(|k| k.to_vec()))
        .collect()
}
