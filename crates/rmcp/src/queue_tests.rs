//! The queue against a memory log: two writers on one stream, and
//! back-pressure.

use super::*;
use mcp_resume_log::{MemoryLog, Retention, StreamKey};

fn rec(n: u8) -> Bytes {
    Bytes::from(vec![b'0' + n])
}

/// A standalone stream another instance also appends to: the queue
/// numbers on from where the log put its batch, and nothing fails.
#[tokio::test]
async fn a_session_stream_with_another_writer_numbers_on_from_the_log() {
    let log: Arc<dyn Log> = Arc::new(MemoryLog::new(Retention::default()));
    let queues = Queues::new(log.clone());
    let loc = Location::from_stream_id("s:common").unwrap();
    assert_eq!(
        queues
            .enqueue(&loc, rec(1), None, false, true)
            .await
            .unwrap(),
        1
    );
    queues.committed(&loc, 1).await.unwrap();
    // The other instance commits seq 2; this queue numbers its next 2.
    log.append("s", StreamKey::Session, vec![rec(9)])
        .await
        .unwrap();
    assert_eq!(
        queues
            .enqueue(&loc, rec(2), None, false, true)
            .await
            .unwrap(),
        2
    );
    let follow = queues.follow(&loc).unwrap();
    follow.clone().wait(3).await.unwrap();
    assert_eq!(
        queues
            .enqueue(&loc, rec(3), None, false, true)
            .await
            .unwrap(),
        4,
        "numbered on from the log's head"
    );
    follow.wait(4).await.unwrap();
    let events = log.read("s", StreamKey::Session, 0, 10).await.unwrap();
    let got: Vec<_> = events.iter().map(|e| e.message.clone()).collect();
    assert_eq!(got, vec![rec(1), rec(9), rec(2), rec(3)]);
}

/// A request stream the log put elsewhere fails, loudly and for good:
/// its numbers were shown to nobody, and none is shown on another event.
#[tokio::test]
async fn a_request_stream_with_another_writer_fails_and_refuses_more() {
    let log: Arc<dyn Log> = Arc::new(MemoryLog::new(Retention::default()));
    let queues = Queues::new(log.clone());
    let loc = Location::from_stream_id("0b1e").unwrap();
    assert_eq!(
        queues
            .enqueue(&loc, rec(1), None, false, false)
            .await
            .unwrap(),
        1
    );
    queues.committed(&loc, 1).await.unwrap();
    log.append(&loc.session, StreamKey::Session, vec![rec(9)])
        .await
        .unwrap();
    assert_eq!(
        queues
            .enqueue(&loc, rec(2), None, false, false)
            .await
            .unwrap(),
        2
    );
    let err = queues.committed(&loc, 2).await.unwrap_err();
    assert!(matches!(err, StoreError::NotCommitted { .. }), "{err}");
    assert!(queues
        .enqueue(&loc, rec(3), None, false, false)
        .await
        .is_err());
    assert!(!queues.is_committed(&loc, 2));
}

/// Past `MAX_QUEUED` uncommitted events a store waits for room, and goes
/// on once the log commits.
#[tokio::test]
async fn a_full_queue_waits_for_room() {
    let log: Arc<dyn Log> = Arc::new(MemoryLog::new(Retention::default()));
    let queues = Queues::new(log.clone());
    let loc = Location::from_stream_id("full").unwrap();
    // Numbered, not flushed yet (the flush task has not run: this test's
    // runtime has one thread and no store here awaits).
    for n in 1..=MAX_QUEUED {
        assert_eq!(
            queues
                .enqueue(&loc, rec(1), None, false, false)
                .await
                .unwrap(),
            n
        );
    }
    let more = queues.enqueue(&loc, rec(2), None, false, false);
    let seq = tokio::time::timeout(std::time::Duration::from_secs(5), more)
        .await
        .expect("the store waited for room that the commit made")
        .unwrap();
    assert_eq!(seq, MAX_QUEUED + 1);
    queues.committed(&loc, seq).await.unwrap();
    assert_eq!(
        log.bounds(&loc.session, StreamKey::Session)
            .await
            .unwrap()
            .head,
        MAX_QUEUED + 1
    );
}

/// A call whose client went away and whose handler never answered leaves
/// its request stream unretired: the queue goes when its session closes,
/// and another session's stays.
#[tokio::test]
async fn closing_a_session_forgets_its_unanswered_request_streams() {
    let log: Arc<dyn Log> = Arc::new(MemoryLog::new(Retention::default()));
    let queues = Queues::new(log.clone());
    let mine = Location::from_stream_id("0b1e").unwrap();
    let theirs = Location::from_stream_id("9c2f").unwrap();
    for (loc, session) in [(&mine, "s1"), (&theirs, "s2")] {
        queues
            .enqueue(loc, rec(1), None, false, true)
            .await
            .unwrap();
        queues.own(loc, session, Bytes::new());
        queues.committed(loc, 1).await.unwrap();
    }
    let standalone = Location::from_stream_id("s1:common").unwrap();
    queues
        .enqueue(&standalone, rec(2), None, false, false)
        .await
        .unwrap();
    queues.forget_session("s1");
    assert!(queues.get(&mine).is_none(), "s1's call stream is forgotten");
    assert!(queues.get(&standalone).is_none(), "and its session stream");
    assert!(queues.get(&theirs).is_some(), "s2's stays");
    // rmcp's worker may still store to it after the close: refused, never
    // numbered from 1 again in a new queue.
    let err = queues
        .enqueue(&mine, rec(3), None, false, true)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("its session closed"), "{err}");
}
