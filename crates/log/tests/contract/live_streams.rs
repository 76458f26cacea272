//! The request streams that hold something: what the orphan sweep,
//! maintenance and the end of a session visit, so that their cost follows
//! what is retained and not every stream a session ever opened; and the
//! retirement of a forwarded message's carrier once it was read.

use std::time::Duration;

use bytes::Bytes;
use mcp_resume_log::{LogError, Retention, StreamKey};
use mcp_resume_testkit::rt;

use crate::common::{backends, msg};

const LONG: Duration = Duration::from_secs(3600);

#[test]
fn live_request_streams_leave_out_retired_and_emptied_ones() {
    rt().block_on(async {
        let mut retention = Retention::default();
        retention.max_age = Duration::from_millis(300);
        for mut b in backends(retention, 1024).await {
            let log = b.log().clone();
            log.create_session("a", Bytes::new()).await.unwrap();
            assert_eq!(
                log.live_request_streams("a").await.unwrap(),
                Vec::<u64>::new()
            );
            for r in 1..=4 {
                let meta = Bytes::from(format!(r#"{{"id":{r}}}"#));
                assert_eq!(
                    log.open_request_stream("a", meta, u64::MAX).await.unwrap(),
                    r
                );
            }
            assert_eq!(
                log.live_request_streams("a").await.unwrap(),
                [1, 2, 3, 4],
                "{}",
                b.name
            );
            // A carrier read once: retired, and its number not handed out again.
            log.retire_request_stream("a", 2).await.unwrap();
            let retires = b.name != "disk";
            if retires {
                assert_eq!(
                    log.live_request_streams("a").await.unwrap(),
                    [1, 3, 4],
                    "{}",
                    b.name
                );
                assert!(
                    matches!(
                        log.request_meta("a", 2).await,
                        Err(LogError::NoStream { .. })
                    ),
                    "{}",
                    b.name
                );
                assert!(matches!(
                    log.bounds("a", StreamKey::Request(2)).await,
                    Err(LogError::NoStream { .. })
                ));
            }
            assert_eq!(
                log.open_request_stream("a", Bytes::new(), u64::MAX)
                    .await
                    .unwrap(),
                5
            );
            // Age retention empties stream 1 (its one event grew old): it
            // leaves the list, and still reads loudly as truncated.
            log.append("a", StreamKey::Request(1), vec![msg(1)])
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(500)).await;
            log.append("a", StreamKey::Request(3), vec![msg(1)])
                .await
                .unwrap();
            log.maintain(LONG, LONG).await.unwrap();
            let want: &[u64] = if retires { &[3, 4, 5] } else { &[2, 3, 4, 5] };
            assert_eq!(
                log.live_request_streams("a").await.unwrap(),
                want,
                "{}",
                b.name
            );
            assert!(
                matches!(
                    log.request_meta("a", 1).await,
                    Err(LogError::Truncated { .. })
                ),
                "{}: {:?}",
                b.name,
                log.request_meta("a", 1).await
            );
            if b.durable() {
                drop(log);
                b.restart().await;
                assert_eq!(
                    b.log().live_request_streams("a").await.unwrap(),
                    want,
                    "{} after a restart",
                    b.name
                );
            }
            let log = b.log().clone();
            assert_eq!(
                log.retire_request_stream("nope", 1).await,
                Err(LogError::NoSession("nope".into()))
            );
            log.end_session("a").await.unwrap();
            assert_eq!(
                log.live_request_streams("a").await,
                Err(LogError::NoSession("a".into()))
            );
        }
    });
}

/// On Redis the end of a session visits the streams that hold something,
/// and still leaves nothing of them behind; a session an older release
/// created (no index) is ended by visiting every number it handed out.
#[test]
fn redis_ends_a_session_by_its_index_and_leaves_no_stream_behind() {
    rt().block_on(async {
        for b in backends(Retention::default(), 1024).await {
            let Some(url) = b.redis_url() else { continue };
            let log = b.log().clone();
            let mut raw = redis::Client::open(url)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            for id in ["new", "old"] {
                log.create_session(id, Bytes::new()).await.unwrap();
                if id == "old" {
                    // As created before the index existed.
                    let _: i64 = redis::cmd("HDEL")
                        .arg(format!("mcpr:{{{id}}}:s"))
                        .arg("x")
                        .query_async(&mut raw)
                        .await
                        .unwrap();
                }
                for r in 1..=50u64 {
                    log.open_request_stream(id, Bytes::new(), u64::MAX)
                        .await
                        .unwrap();
                    log.append(id, StreamKey::Request(r), vec![msg(r)])
                        .await
                        .unwrap();
                    if r % 2 == 0 && id == "new" {
                        log.retire_request_stream(id, r).await.unwrap();
                    }
                }
                log.append(id, StreamKey::Session, vec![msg(1)])
                    .await
                    .unwrap();
                let live = log.live_request_streams(id).await.unwrap();
                let want: Vec<u64> = match id {
                    "new" => (1..=50).filter(|r| r % 2 == 1).collect(),
                    _ => (1..=50).collect(),
                };
                assert_eq!(live, want, "{id}");
                let _: () = redis::cmd("CONFIG")
                    .arg("RESETSTAT")
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                log.end_session(id).await.unwrap();
                // One DEL per stream that holds something (and one each for
                // the session stream and the rest), not one per number.
                let stats: String = redis::cmd("INFO")
                    .arg("commandstats")
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                let dels: usize = stats
                    .lines()
                    .find_map(|l| l.strip_prefix("cmdstat_del:calls="))
                    .and_then(|v| v.split(',').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                assert_eq!(dels, live.len() + 2, "{id}: {stats}");
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("mcpr:{{{id}}}:*"))
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                assert_eq!(
                    keys,
                    [format!("mcpr:{{{id}}}:s")],
                    "{id}: only the tombstone stays"
                );
            }
        }
    });
}
