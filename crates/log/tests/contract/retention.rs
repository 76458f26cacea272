//! What retention keeps and what it lets go, on every backend: never past
//! a live pin, by age at a maintenance pass (and idle sessions ended by
//! it), and nothing at all on a pass whose reads fail.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{backends, msg};
use bytes::Bytes;
use mcp_resume_log::{Log, LogError, Retention, StreamKey};
use mcp_resume_testkit::rt;

const S: StreamKey = StreamKey::Session;

/// Retention by age: 2 s, with room for 100 events.
fn by_age() -> Retention {
    let mut retention = Retention::default();
    retention.max_events = 100;
    // Event 4 of [`three_old_then_one_new`] must stay younger than this
    // through both passes of the tests; at 50 ms, a loaded machine (Redis
    // Cluster, both cores busy) once took longer and the second pass
    // rightly trimmed it too.
    retention.max_age = Duration::from_secs(2);
    retention
}

/// Session `a` with events 1 to 3 older than [`by_age`] keeps, and event 4
/// new.
async fn three_old_then_one_new(log: &Arc<dyn Log>) {
    log.create_session("a", Bytes::new()).await.unwrap();
    log.append("a", S, (1..=3).map(msg).collect())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2200)).await;
    log.append("a", S, vec![msg(4)]).await.unwrap();
}

#[test]
fn retention_never_passes_a_pin() {
    rt().block_on(async {
        let mut retention = Retention::default();
        retention.max_events = 5;
        for b in backends(retention, 1024).await {
            let log = b.log();
            log.create_session("a", Bytes::new()).await.unwrap();
            log.append("a", S, (1..=5).map(msg).collect())
                .await
                .unwrap();
            let pin = log.pin("a", S, 2, Duration::from_secs(60)).await.unwrap();
            log.append("a", S, (6..=20).map(msg).collect())
                .await
                .unwrap();
            assert_eq!(log.bounds("a", S).await.unwrap().floor, 2, "{}", b.name);
            assert_eq!(log.read("a", S, 1, 100).await.unwrap().len(), 19);
            log.unpin("a", pin).await.unwrap();
            log.append("a", S, vec![msg(21)]).await.unwrap();
            assert_eq!(log.bounds("a", S).await.unwrap().floor, 17);
            // An expired pin does not hold anything.
            log.pin("a", S, 17, Duration::from_millis(1)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
            log.append("a", S, vec![msg(22)]).await.unwrap();
            assert_eq!(log.bounds("a", S).await.unwrap().floor, 18);
        }
    });
}

#[test]
fn age_retention_and_idle_expiry() {
    rt().block_on(async {
        for b in backends(by_age(), 1024).await {
            let log = b.log();
            three_old_then_one_new(log).await;
            assert!(log
                .maintain(Duration::from_secs(60), Duration::from_secs(3600))
                .await
                .unwrap()
                .ended
                .is_empty());
            assert_eq!(log.bounds("a", S).await.unwrap().floor, 4, "{}", b.name);
            log.create_session("b", Bytes::new()).await.unwrap();
            // Margins a loaded machine keeps: b idle 1.5 s, a touched just
            // before a maintenance pass that ends what is idle for 1 s.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            log.touch("a").await.unwrap();
            let ended = log
                .maintain(Duration::from_secs(1), Duration::from_secs(3600))
                .await
                .unwrap()
                .ended;
            assert_eq!(ended, vec!["b".to_string()]);
            assert!(matches!(
                log.session("b").await,
                Err(LogError::NoSession(_))
            ));
            assert!(log.session("a").await.is_ok());
        }
    });
}

#[test]
fn a_read_that_fails_during_maintenance_trims_nothing() {
    rt().block_on(async {
        for b in backends(by_age(), 1024).await {
            let log = b.log();
            three_old_then_one_new(log).await;
            if !b.fail_reads(u64::MAX) {
                continue; // memory: housekeeping reads nothing that could fail
            }
            assert!(log
                .maintain(Duration::from_secs(60), Duration::from_secs(3600))
                .await
                .unwrap()
                .ended
                .is_empty());
            b.fail_reads(0);
            assert_eq!(
                log.bounds("a", S).await.unwrap(),
                mcp_resume_log::Bounds::new(4, 1),
                "{}: a failed read must not trim anything",
                b.name
            );
            assert_eq!(log.read("a", S, 0, 10).await.unwrap().len(), 4);
            // Once reads work again, the same pass trims exactly the old events.
            log.maintain(Duration::from_secs(60), Duration::from_secs(3600))
                .await
                .unwrap();
            assert_eq!(log.bounds("a", S).await.unwrap().floor, 4, "{}", b.name);
        }
    });
}
