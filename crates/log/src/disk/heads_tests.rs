//! The committed-heads record read back: records, sync marks, a torn tail
//! and damage told apart, and a damaged record's intact records salvaged.

use bytes::Bytes;

use super::*;
use crate::{DiskLog, EventLog, LogError, Retention, SessionRecords, StreamKey};

fn head(id: &str, stream: u64, head: Seq) -> Entry {
    Entry::Head {
        id: id.into(),
        stream,
        head,
    }
}

/// Where each record of a record file starts.
fn starts(bytes: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = MAGIC.len();
    while let Some((len, _)) = record_at(&bytes[at..]) {
        out.push(at);
        at += RECORD_HEADER + len;
    }
    out
}

#[test]
fn records_read_back_and_a_torn_tail_after_the_last_fsync_is_read_past() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = HeadsWriter::create(dir.path(), &[head("a", 0, 3)]).unwrap();
    w.append(&[head("a", 0, 9), head("a", 2, 1), head("b", 0, 0)])
        .unwrap();
    w.append(&[Entry::Ended { id: "b".into() }]).unwrap();
    w.append(&[head("c", 0, 4)]).unwrap();
    w.append(&[Entry::Forgotten { id: "c".into() }]).unwrap();
    drop(w);
    let r = read(dir.path()).unwrap().unwrap();
    assert_eq!(r.stopped, None);
    assert_eq!(r.sessions["a"].streams, HashMap::from([(0, 9), (2, 1)]));
    assert!(r.sessions["b"].ended && r.sessions["b"].streams.is_empty());
    assert!(!r.sessions.contains_key("c"));
    // A clean close ends with a sync mark of everything before it.
    let bytes = std::fs::read(dir.path().join(FILE)).unwrap();
    let last = *starts(&bytes).last().unwrap();
    let (_, entries) = record_at(&bytes[last..]).unwrap();
    assert_eq!(entries, [Entry::Synced { upto: last as u64 }]);
    // Written after that (no fsync since), then cut: a torn tail.
    append_record(dir.path(), &[head("d", 0, 7)]);
    let bytes = std::fs::read(dir.path().join(FILE)).unwrap();
    let r = parse(&bytes[..bytes.len() - 3]).unwrap();
    assert!(r.stopped.is_some());
    assert!(!r.sessions.contains_key("d") && r.sessions.contains_key("a"));
    // A flipped bit in an early record, a sync mark after it: damage.
    let mut bad = bytes.clone();
    bad[MAGIC.len() + RECORD_HEADER + 1] ^= 1;
    assert!(parse(&bad).is_err());
    // The last record's checksum failing: a torn tail.
    let mut torn = bytes.clone();
    let end = torn.len() - 1;
    torn[end] ^= 1;
    assert!(parse(&torn).unwrap().stopped.is_some());
    assert!(parse(b"garbage!").is_err());
}

#[test]
fn a_damaged_length_field_of_a_synced_record_is_damage_not_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = HeadsWriter::create(dir.path(), &[head("a", 0, 1)]).unwrap();
    w.append(&[head("a", 0, 5)]).unwrap();
    w.append(&[head("b", 0, 2)]).unwrap();
    drop(w);
    let bytes = std::fs::read(dir.path().join(FILE)).unwrap();
    // The record of a's head 5 (after the snapshot and its mark).
    let at = starts(&bytes)[2];
    assert_eq!(record_at(&bytes[at..]).unwrap().1, [head("a", 0, 5)]);
    for (byte, value) in [(0, 0xff), (1, 0x7f), (3, 0x01), (0, 0x00)] {
        let mut bad = bytes.clone();
        bad[at + byte] = value;
        let e = parse(&bad).expect_err("damage read as a torn tail");
        assert!(e.contains("fsync"), "{e}");
        // What is intact around it still says what it says.
        let mut salvaged = scan(&bad).unwrap().rec;
        assert_eq!(salvaged.sessions.remove("b").unwrap().streams[&0], 2);
    }
    // The same bytes in the torn window (no mark after them): read past,
    // the intact records after them applied.
    let mut torn = bytes[..starts(&bytes)[4]].to_vec();
    torn[at] = 0xff;
    let r = parse(&torn).unwrap();
    assert!(r.stopped.is_some());
    assert_eq!(r.sessions["b"].streams[&0], 2);
}

#[test]
fn a_record_of_version_1_is_still_read() {
    let mut v1 = MAGIC_V1.to_vec();
    let mut payload = Vec::new();
    encode_entry(&head("a", 0, 4), &mut payload);
    seal(&payload, &mut v1);
    let r = parse(&v1).unwrap();
    assert_eq!(r.sessions["a"].streams[&0], 4);
    // Without marks, a bad record with intact ones after it is damage.
    let mut bad = v1.clone();
    seal(&payload, &mut bad);
    bad[MAGIC.len()] ^= 0x40;
    assert!(parse(&bad).is_err());
}

/// A log whose session `a` committed 20 events, of which the journal kept
/// 10 (its committed-heads record says 20); that record's neighbour damaged
/// by `damage` (the record and an intact sync mark after it).
async fn lost_behind_a_damaged_record(dir: &Path, damage: impl Fn(&mut [u8], usize)) {
    {
        let log = DiskLog::open(dir, Retention::default()).unwrap();
        log.create_session("a", Bytes::new()).await.unwrap();
        for _ in 0..10 {
            log.append("a", StreamKey::Session, vec![Bytes::from_static(b"{}")])
                .await
                .unwrap();
        }
    }
    append_record(dir, &[head("z", 0, 0)]);
    append_record(dir, &[head("a", 0, 20)]);
    let len = std::fs::metadata(dir.join(FILE)).unwrap().len();
    append_record(dir, &[Entry::Synced { upto: len }]);
    let mut bytes = std::fs::read(dir.join(FILE)).unwrap();
    let s = starts(&bytes);
    let z = s[s.len() - 3];
    damage(&mut bytes, z);
    std::fs::write(dir.join(FILE), &bytes).unwrap();
}

#[tokio::test]
async fn a_damaged_record_refuses_the_open_and_a_repair_applies_its_intact_neighbours() {
    for (what, damage) in [
        (
            "length field",
            (|b: &mut [u8], at: usize| b[at + 1] = 0x70) as fn(&mut [u8], usize),
        ),
        ("payload", |b: &mut [u8], at: usize| {
            b[at + RECORD_HEADER + 4] ^= 1
        }),
    ] {
        let dir = tempfile::tempdir().unwrap();
        lost_behind_a_damaged_record(dir.path(), damage).await;
        let opened = DiskLog::open(dir.path(), Retention::default());
        assert!(
            matches!(opened, Err(LogError::Corrupt(_))),
            "{what}: opened over a damaged committed-heads record"
        );
        let report = DiskLog::check(dir.path(), false).unwrap();
        assert!(!report.is_clean(), "{what}: {report:?}");
        assert_eq!(report.damage.len(), 1, "{what}: {report:?}");
        let report = DiskLog::check(dir.path(), true).unwrap();
        assert!(report.problems.is_empty(), "{what}: {report:?}");
        assert!(!report.repaired.is_empty(), "{what}: {report:?}");
        // Seqs 11 ..= 20 were committed and are gone: refused, never reused.
        let log = DiskLog::open(dir.path(), Retention::default()).unwrap();
        let b = log.bounds("a", StreamKey::Session).await.unwrap();
        assert_eq!((b.head, b.lost), (20, Some((11, 20))), "{what}");
        let next = log
            .append("a", StreamKey::Session, vec![Bytes::from_static(b"{}")])
            .await
            .unwrap();
        assert_eq!(next, 21, "{what}");
    }
}
