//! The members of a session's follower set (`mcpr:{SESSION}:f`), in the two
//! forms instances read, when this instance may write the short one, and
//! the ring of the followers after a commit where the append script does
//! not ring ([`ring`]).
//!
//! - The named form, `WAKE|STREAM` (`mcpr:wake:{NONCE}|mcpr:{SESSION}:ev:N`),
//!   is what every release reads. Its 110 bytes make the set a hash table
//!   in Redis: 344 bytes for a session with one follower.
//! - The compact form, the instance's 12-digit nonce followed by the
//!   stream's number (`1234567890120` for stream 0), is a number: a set of
//!   numbers is an intset in Redis, 136 bytes for one member, so an idle
//!   session with a reader costs Redis under 1 KB. Streams numbered past
//!   [`COMPACT_MAX_STREAM`] keep the named form (the member would not fit
//!   in 64 bits).
//!
//! Releases before the compact form skip its members, so an instance of one
//! would not wake a follower registered by it. Every instance's heartbeat
//! (`mcpr:instance:ID`) therefore says which forms it reads
//! ([`super::super::instance::GENERATION`]): an instance registers compact
//! members only while every live instance reads them ([`fleet_generation`],
//! checked every [`CHECK_EVERY`]); when that changes it registers what it
//! follows again in the other form (an older instance joining: within the
//! check, and every followed stream is read once, so a commit of the older
//! instance meanwhile is delayed, not lost). Every release that wrote
//! follower sets registers in `mcpr:instances`, so none is missed by the
//! check; an older instance whose heartbeat lapsed (frozen, evicted) counts
//! as gone until it beats again, and is served the same way then. A stream
//! registered while the form changes asks for another reform once it is in
//! its shard (`Bell::registered_under`).

use std::time::Duration;

use super::super::conn::Conn;
use super::super::{buckets, instance};

/// How often an instance checks which forms the live instances read.
pub(super) const CHECK_EVERY: Duration = Duration::from_secs(3);

/// The highest stream number a compact member holds (12 digits of nonce and
/// at most 6 of stream stay below 2^63).
pub(super) const COMPACT_MAX_STREAM: u64 = 999_999;

/// The lowest and one past the highest nonce: 12 decimal digits, the first
/// not zero (a number with a leading zero is a string to Redis).
const NONCE_MIN: u64 = 100_000_000_000;
const NONCE_END: u64 = 1_000_000_000_000;

/// A random nonce for this instance's wake stream (12 digits).
pub(super) fn new_nonce() -> u64 {
    let mut b = [0u8; 8];
    let _ = getrandom::fill(&mut b);
    NONCE_MIN + u64::from_le_bytes(b) % (NONCE_END - NONCE_MIN)
}

/// The wake stream of the instance with `nonce`.
pub(super) fn wake_key(nonce: u64) -> String {
    format!("mcpr:wake:{{{nonce}}}")
}

/// The number of stream key `mcpr:{SESSION}:ev:N`.
fn stream_number(stream: &str) -> Option<u64> {
    stream.rsplit_once(":ev:")?.1.parse().ok()
}

/// The named member: `WAKE|STREAM`.
pub(super) fn named(nonce: u64, stream: &str) -> String {
    format!("{}|{stream}", wake_key(nonce))
}

/// The compact member (`None` past [`COMPACT_MAX_STREAM`], or for a key
/// that is not a session's stream).
pub(super) fn compact(nonce: u64, stream: &str) -> Option<String> {
    let n = stream_number(stream).filter(|n| *n <= COMPACT_MAX_STREAM)?;
    Some(format!("{nonce}{n}"))
}

/// The wake stream and the stream key a member of the follower set of
/// `prefix` (`mcpr:{SESSION}`) names, in either form.
pub(super) fn parse(member: &str, prefix: &str) -> Option<(String, String)> {
    if let Some((wake, stream)) = member.split_once('|') {
        return Some((wake.to_owned(), stream.to_owned()));
    }
    if member.len() <= 12 || !member.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (nonce, n) = member.split_at(12);
    Some((format!("mcpr:wake:{{{nonce}}}"), format!("{prefix}:ev:{n}")))
}

/// The lowest generation among the live instances: each registered
/// instance's heartbeat says its own (`None`: Redis did not answer).
pub(super) async fn fleet_generation(conn: &Conn) -> Option<u32> {
    let registered: Vec<String> = redis::cmd("SMEMBERS")
        .arg(buckets::INSTANCES)
        .query_async(&mut conn.clone())
        .await
        .ok()?;
    let cmds = registered
        .iter()
        .map(|i| {
            let mut c = redis::cmd("GET");
            c.arg(instance::key(i));
            c
        })
        .collect();
    let generations: Vec<Option<String>> = conn.each(cmds).await.ok()?;
    // A missing key is a dead instance, which commits nothing; a value
    // that is no number, the oldest.
    Some(
        generations
            .into_iter()
            .flatten()
            .map(|g| g.parse::<u32>().unwrap_or(1))
            .min()
            .unwrap_or(instance::GENERATION),
    )
}

/// The follower set of the session whose keys start with `prefix` (`mcpr:{id}`).
pub(in crate::redis) fn followers_key(prefix: &str) -> String {
    format!("{prefix}:f")
}

/// After a commit on `stream` (of the session whose keys start with
/// `prefix`): wakes every instance that follows it but the committing one,
/// whose wake stream is `me` (it hands the commit to its own readers,
/// [`super::local`]).
pub(in crate::redis) async fn ring(conn: Conn, prefix: String, stream: String, me: String) {
    let fkey = followers_key(&prefix);
    let Ok(registered) = redis::cmd("SMEMBERS")
        .arg(&fkey)
        .query_async::<Vec<String>>(&mut conn.clone())
        .await
    else {
        return;
    };
    for m in registered {
        let Some((wake, s)) = parse(&m, &prefix) else {
            continue;
        };
        if s != stream || wake == me {
            continue;
        }
        let added: Result<Option<String>, _> = redis::cmd("XADD")
            .arg(&wake)
            .arg("NOMKSTREAM")
            .arg("MAXLEN")
            .arg("~")
            .arg(super::bell::MAXLEN)
            .arg("*")
            .arg("k")
            .arg(&s)
            .query_async(&mut conn.clone())
            .await;
        if let Ok(None) = added {
            // Its instance is gone: forget the registration.
            let _: Result<i64, _> = redis::cmd("SREM")
                .arg(&fkey)
                .arg(&m)
                .query_async(&mut conn.clone())
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_name_the_same_wake_stream_and_stream() {
        let prefix = "mcpr:{abc}";
        let nonce = 123_456_789_012;
        for n in [0, 7, COMPACT_MAX_STREAM] {
            let stream = format!("{prefix}:ev:{n}");
            let want = Some((wake_key(nonce), stream.clone()));
            assert_eq!(parse(&named(nonce, &stream), prefix), want);
            let c = compact(nonce, &stream).unwrap();
            assert!(c.parse::<i64>().is_ok(), "{c} is a number to Redis");
            assert_eq!(parse(&c, prefix), want);
        }
        let past = format!("{prefix}:ev:{}", COMPACT_MAX_STREAM + 1);
        assert_eq!(compact(nonce, &past), None);
        assert_eq!(parse("junk", prefix), None);
        assert_eq!(parse("123", prefix), None);
    }

    #[test]
    fn nonces_have_twelve_digits() {
        for _ in 0..1000 {
            assert_eq!(new_nonce().to_string().len(), 12);
        }
    }
}
