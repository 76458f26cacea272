//! Reading Redis stream replies into events.

use bytes::Bytes;
use redis::Value;

use crate::{Event, LogError};

fn bad() -> LogError {
    LogError::Corrupt("unexpected stream entry shape".into())
}

/// Parses `XRANGE`-shaped entries: `[[id, [field, value, ...]], ...]`.
pub(super) fn entries(v: &Value) -> Result<Vec<Event>, LogError> {
    let Value::Array(items) = v else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Value::Array(pair) = item else {
            return Err(bad());
        };
        let (Some(Value::BulkString(id)), Some(Value::Array(fields))) = (pair.first(), pair.get(1))
        else {
            return Err(bad());
        };
        let id = std::str::from_utf8(id).map_err(|_| bad())?;
        // Either layout (`layout.rs`): `SEQ-0` or `0-SEQ`.
        let seq = super::layout::seq_of(id).ok_or_else(bad)?;
        let (mut at_ms, mut message) = (0, Bytes::new());
        for kv in fields.chunks(2) {
            if let [Value::BulkString(k), Value::BulkString(v)] = kv {
                match k.as_slice() {
                    b"t" => at_ms = number(v).unwrap_or(0),
                    b"m" => message = Bytes::copy_from_slice(v),
                    _ => {}
                }
            }
        }
        out.push(Event {
            seq,
            at_ms,
            message,
        });
    }
    Ok(out)
}

/// Splits an `XREAD` reply (`[[key, entries], ...]`, a map under RESP3, or
/// nil on timeout) by key.
pub(super) fn by_key(v: &Value) -> Vec<(&[u8], &Value)> {
    if let Value::Map(m) = v {
        return m
            .iter()
            .filter_map(|(k, e)| match k {
                Value::BulkString(k) => Some((k.as_slice(), e)),
                _ => None,
            })
            .collect();
    }
    let Value::Array(streams) = v else {
        return Vec::new();
    };
    streams
        .iter()
        .filter_map(|s| match s {
            Value::Array(kv) => match (kv.first(), kv.get(1)) {
                (Some(Value::BulkString(k)), Some(entries)) => Some((k.as_slice(), entries)),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The id of the last entry of an `XREAD` key's entries, as Redis spelt it.
pub(super) fn last_id(entries: &Value) -> Option<String> {
    let Value::Array(items) = entries else {
        return None;
    };
    match items.last()? {
        Value::Array(pair) => match pair.first()? {
            Value::BulkString(id) => String::from_utf8(id.clone()).ok(),
            _ => None,
        },
        _ => None,
    }
}

/// The non-empty values of `field` in a stream's entries (`[[id, [k, v,
/// ...]], ...]`), sorted, each once: the streams a wake-up names, the
/// sessions an end notice names.
pub(super) fn field_values(entries: &Value, field: &[u8]) -> Vec<String> {
    let Value::Array(items) = entries else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for item in items {
        if let Value::Array(pair) = item {
            if let Some(Value::Array(fields)) = pair.get(1) {
                for kv in fields.chunks(2) {
                    if let [Value::BulkString(k), Value::BulkString(v)] = kv {
                        if k == field && !v.is_empty() {
                            out.push(String::from_utf8_lossy(v).into_owned());
                        }
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// One wake-up read from a wake stream: the stream a commit woke and, when
/// the commit was small enough to carry (one server, `append.lua`), its
/// events: the first one's seq, their time and messages, in order.
pub(super) struct Wake {
    pub stream: String,
    pub first: Option<u64>,
    pub at_ms: u64,
    pub messages: Vec<Bytes>,
}

/// The wake-ups of wake stream entries (fields `k`, and with a payload `s`,
/// `t` and one `m` per message), in the order they were added; entries
/// with no stream (the reader's own marks) are skipped.
pub(super) fn wakes(entries: &Value) -> Vec<Wake> {
    let Value::Array(items) = entries else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Value::Array(pair) = item else { continue };
        let Some(Value::Array(fields)) = pair.get(1) else {
            continue;
        };
        let mut w = Wake {
            stream: String::new(),
            first: None,
            at_ms: 0,
            messages: Vec::new(),
        };
        for kv in fields.chunks(2) {
            if let [Value::BulkString(k), Value::BulkString(v)] = kv {
                match k.as_slice() {
                    b"k" => w.stream = String::from_utf8_lossy(v).into_owned(),
                    b"s" => w.first = number(v),
                    b"t" => w.at_ms = number(v).unwrap_or(0),
                    b"m" => w.messages.push(Bytes::copy_from_slice(v)),
                    _ => {}
                }
            }
        }
        if !w.stream.is_empty() {
            out.push(w);
        }
    }
    out
}

/// A field's value as a number (`None` if it is not one).
fn number(v: &[u8]) -> Option<u64> {
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// Whether entries after `read` (an id this reader has read up to) were
/// trimmed from a stream, from its `XINFO STREAM` reply; `None` when the
/// reply or the id cannot be read. The wake stream's and the end notices'
/// readers ask it: what was trimmed unread is news they missed.
pub(super) fn trimmed_past(info: &Value, read: &str) -> Option<bool> {
    Some(max_deleted(info)? > stream_id(read)?)
}

/// A stream entry id (`MS-SEQ`) as a pair that orders as Redis orders them;
/// `None` for anything else (`$`, a malformed id).
pub(super) fn stream_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// The `max-deleted-entry-id` of an `XINFO STREAM` reply (a flat array of
/// names and values, or a map under RESP3): the newest entry a trim or a
/// delete removed (`0-0` when none was).
pub(super) fn max_deleted(info: &Value) -> Option<(u64, u64)> {
    let pairs: Vec<(&Value, &Value)> = match info {
        Value::Map(m) => m.iter().map(|(k, v)| (k, v)).collect(),
        Value::Array(flat) => flat
            .chunks(2)
            .filter_map(|kv| Some((kv.first()?, kv.get(1)?)))
            .collect(),
        _ => return None,
    };
    pairs.into_iter().find_map(|(k, v)| match (k, v) {
        (Value::BulkString(k), Value::BulkString(v)) if k == b"max-deleted-entry-id" => {
            stream_id(std::str::from_utf8(v).ok()?)
        }
        (Value::SimpleString(k), Value::SimpleString(v)) if k == "max-deleted-entry-id" => {
            stream_id(v)
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_order_as_redis_orders_them() {
        assert!(stream_id("10-2") < stream_id("10-10"));
        assert!(stream_id("9-99") < stream_id("10-0"));
        assert_eq!(stream_id("$"), None);
    }

    #[test]
    fn max_deleted_is_read_from_a_flat_or_a_map_reply() {
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let flat = Value::Array(vec![
            b("length"),
            Value::Int(3),
            b("max-deleted-entry-id"),
            b("17-4"),
        ]);
        assert_eq!(max_deleted(&flat), Some((17, 4)));
        let map = Value::Map(vec![(b("max-deleted-entry-id"), b("0-0"))]);
        assert_eq!(max_deleted(&map), Some((0, 0)));
        assert_eq!(max_deleted(&Value::Nil), None);
    }
}
