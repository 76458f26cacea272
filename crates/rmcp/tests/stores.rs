//! The log's contract, as far as it applies to rmcp's stores, on memory, disk
//! and Redis: an id is returned only once its event is committed (a reopened
//! log replays it), ids carry stream and seq, a replay is one stream's events
//! in order and then stays open for later appends with no gap and no
//! duplicate at the seam, even when the reader lags; unusable ids are errors,
//! never empty streams; session state is durable and never resurrected.

mod common;

use std::time::Duration;

use common::{backends, rt};
use futures_util::StreamExt;
use mcp_resume_log::{LogError, Retention};
use mcp_resume_rmcp::{LogEventStore, LogSessionStore, StoreError};
use rmcp::{
    model::ServerJsonRpcMessage,
    transport::streamable_http_server::session::{
        EventStore, EventStream, ServerSseMessage, SessionState, SessionStore,
    },
};

fn note(i: u64) -> ServerSseMessage {
    let json = serde_json::json!({
        "jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": {"i": i}}
    });
    ServerSseMessage::from_message(serde_json::from_value(json).unwrap())
}

fn response(id: u64) -> ServerSseMessage {
    let json = serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {"content": []}});
    ServerSseMessage::from_message(serde_json::from_value(json).unwrap())
}

/// `data.i` of a notification event.
fn i_of(m: &ServerSseMessage) -> Option<u64> {
    let v = serde_json::to_value(m.message.as_deref()?).ok()?;
    v["params"]["data"]["i"].as_u64()
}

async fn take(stream: &mut EventStream, n: usize) -> Vec<ServerSseMessage> {
    let mut out = Vec::new();
    while out.len() < n {
        match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
            Ok(Some(m)) => out.push(m),
            Ok(None) => panic!("the replay ended after {} of {n} events", out.len()),
            Err(_) => panic!("timed out after {} of {n} events", out.len()),
        }
    }
    out
}

/// Nothing more arrives within a short while (the stream is open and idle).
async fn idle(stream: &mut EventStream) {
    if let Ok(m) = tokio::time::timeout(Duration::from_millis(200), stream.next()).await {
        panic!("expected an idle open stream, got {m:?}");
    }
}

fn refusal(e: Box<dyn std::error::Error + Send + Sync>) -> StoreError {
    *e.downcast::<StoreError>().expect("a StoreError")
}

#[test]
fn ids_are_committed_carry_stream_and_seq_and_replay_one_stream() {
    rt().block_on(async {
        for mut b in backends(Retention::default(), 1024).await {
            let store = LogEventStore::new(b.log.clone());
            let mut ids = Vec::new();
            for i in 1..=5 {
                ids.push(store.store_event("s1:common", &note(i)).await.unwrap());
                // Another session's and a request stream's events interleave.
                store
                    .store_event("s2:common", &note(100 + i))
                    .await
                    .unwrap();
            }
            store.store_event("0e7c-req", &note(7)).await.unwrap();
            drop(store);
            assert_eq!(ids[0], "s1/0/1", "{}", b.name);
            assert_eq!(ids[4], "s1/0/5");
            // A reopened log (another process) replays exactly what was acknowledged.
            let reopened = b.reopen().await;
            let other = LogEventStore::new(reopened);
            let mut s = other.replay_events_after(&ids[1]).await.unwrap();
            let got = take(&mut s, 3).await;
            assert_eq!(
                got.iter().map(i_of).collect::<Vec<_>>(),
                [Some(3), Some(4), Some(5)]
            );
            assert_eq!(got[0].event_id.as_deref(), Some(ids[2].as_str()));
            assert_eq!(got[2].event_id.as_deref(), Some(ids[4].as_str()));
            idle(&mut s).await;
        }
    });
}

#[test]
fn the_replay_stays_open_and_tails_later_appends_with_no_gap_or_duplicate() {
    rt().block_on(async {
        for b in backends(Retention::default(), 1024).await {
            let writer = LogEventStore::new(b.log.clone());
            let first = writer.store_event("t:common", &note(1)).await.unwrap();
            // The reader is another handle (another instance on Redis).
            let reader = LogEventStore::new(b.other_handle().await);
            let w = writer.clone();
            // Appends race the replay's commit point.
            let appends = tokio::spawn(async move {
                for i in 2..=300 {
                    w.store_event("t:common", &note(i)).await.unwrap();
                }
            });
            let mut s = reader.replay_events_after(&first).await.unwrap();
            let got = take(&mut s, 299).await;
            appends.await.unwrap();
            assert_eq!(
                got.iter().map(i_of).collect::<Vec<_>>(),
                (2..=300).map(Some).collect::<Vec<_>>(),
                "{}",
                b.name
            );
            idle(&mut s).await;
            writer.store_event("t:common", &note(301)).await.unwrap();
            assert_eq!(i_of(&take(&mut s, 1).await[0]), Some(301));
        }
    });
}

#[test]
fn a_lagging_replay_resubscribes_instead_of_skipping() {
    rt().block_on(async {
        // Subscribers lag after 4 unread events.
        for b in backends(Retention::default(), 4).await {
            let store = LogEventStore::new(b.log.clone());
            let first = store.store_event("l:common", &note(1)).await.unwrap();
            let mut s = store.replay_events_after(&first).await.unwrap();
            for i in 2..=200 {
                store.store_event("l:common", &note(i)).await.unwrap();
            }
            let got = take(&mut s, 199).await;
            assert_eq!(
                got.iter().map(i_of).collect::<Vec<_>>(),
                (2..=200).map(Some).collect::<Vec<_>>(),
                "{}",
                b.name
            );
        }
    });
}

#[test]
fn unusable_ids_are_errors_never_empty_streams() {
    rt().block_on(async {
        let mut retention = Retention::default();
        retention.max_events = 3;
        for b in backends(retention, 1024).await {
            let store = LogEventStore::new(b.log.clone());
            for i in 1..=6 {
                store.store_event("e:common", &note(i)).await.unwrap();
            }
            let err = |id: &'static str| {
                let store = store.clone();
                async move {
                    refusal(
                        store
                            .replay_events_after(id)
                            .await
                            .err()
                            .unwrap_or_else(|| panic!("{id} was accepted")),
                    )
                }
            };
            assert!(
                matches!(err("e/0/9").await.log_error(), Some(LogError::Ahead { .. })),
                "{}",
                b.name
            );
            assert!(
                matches!(
                    err("e/0/1").await.log_error(),
                    Some(LogError::Truncated { .. })
                ),
                "{}",
                b.name
            );
            assert!(matches!(
                err("nobody/0/1").await.log_error(),
                Some(LogError::NoSession(_))
            ));
            assert!(matches!(err("garbage").await, StoreError::BadEventId(_)));
            assert!(matches!(err("0").await, StoreError::BadEventId(_)));
            // The floor itself is still served.
            let mut s = store.replay_events_after("e/0/3").await.unwrap();
            assert_eq!(
                take(&mut s, 3).await.iter().map(i_of).collect::<Vec<_>>(),
                [Some(4), Some(5), Some(6)]
            );
            // An ended session: open replays end, new ones are refused, and
            // its stream is never re-created by a late event.
            b.log.end_session("e").await.unwrap();
            assert!(tokio::time::timeout(Duration::from_secs(5), s.next())
                .await
                .unwrap()
                .is_none());
            assert!(matches!(
                err("e/0/6").await.log_error(),
                Some(LogError::NoSession(_))
            ));
            assert!(
                store.store_event("e:common", &note(7)).await.is_err(),
                "{}",
                b.name
            );
        }
    });
}

#[test]
fn request_streams_end_after_their_response() {
    rt().block_on(async {
        for b in backends(Retention::default(), 1024).await {
            let store = LogEventStore::new(b.log.clone());
            let prime = store
                .store_event(
                    "9f1d-uuid",
                    &ServerSseMessage::retry(Duration::from_secs(3)),
                )
                .await
                .unwrap();
            let n1 = store.store_event("9f1d-uuid", &note(1)).await.unwrap();
            let mut s = store.replay_events_after(&prime).await.unwrap();
            let got = take(&mut s, 1).await;
            assert_eq!(got[0].event_id.as_deref(), Some(n1.as_str()), "{}", b.name);
            let done = store.store_event("9f1d-uuid", &response(4)).await.unwrap();
            assert!(matches!(
                take(&mut s, 1).await[0].message.as_deref(),
                Some(ServerJsonRpcMessage::Response(_))
            ));
            assert!(tokio::time::timeout(Duration::from_secs(5), s.next())
                .await
                .unwrap()
                .is_none());
            // Resumed after the response: nothing left, the stream ends at once.
            let mut s = store.replay_events_after(&done).await.unwrap();
            assert!(tokio::time::timeout(Duration::from_secs(5), s.next())
                .await
                .unwrap()
                .is_none());
            // The priming event replays as a retry hint with its id.
            let mut s = store
                .replay_events_after(&prime.replace("/0/1", "/0/0"))
                .await
                .unwrap();
            let p = take(&mut s, 1).await.remove(0);
            assert_eq!(
                (p.message.is_none(), p.retry),
                (true, Some(Duration::from_secs(3)))
            );
        }
    });
}

fn state(name: &str) -> SessionState {
    let params = serde_json::json!({
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": name, "version": "1"}
    });
    SessionState::new(serde_json::from_value(params).unwrap())
}

#[test]
fn session_state_is_durable_and_never_resurrected() {
    rt().block_on(async {
        for mut b in backends(Retention::default(), 1024).await {
            let sessions = LogSessionStore::new(b.log.clone());
            let events = LogEventStore::new(b.log.clone());
            assert!(sessions.load("x").await.unwrap().is_none(), "{}", b.name);
            // An event stored before the handshake creates the log session
            // without state; the handshake's state then lands on it.
            events.store_event("x:common", &note(1)).await.unwrap();
            assert!(sessions.load("x").await.unwrap().is_none());
            sessions.store("x", &state("one")).await.unwrap();
            sessions.store("y", &state("two")).await.unwrap();
            drop((sessions, events));
            let again = LogSessionStore::new(b.reopen().await);
            if b.durable() {
                let got = again.load("x").await.unwrap().expect("durable state");
                assert_eq!(got.initialize_params.client_info.name, "one");
                assert_eq!(
                    again
                        .load("y")
                        .await
                        .unwrap()
                        .unwrap()
                        .initialize_params
                        .client_info
                        .name,
                    "two"
                );
            }
            let sessions = LogSessionStore::new(b.log.clone());
            sessions.delete("y").await.unwrap();
            sessions.delete("y").await.unwrap();
            assert!(sessions.load("y").await.unwrap().is_none());
            assert!(
                sessions.store("y", &state("three")).await.is_err(),
                "an ended session stays ended"
            );
        }
    });
}

#[test]
fn a_request_stream_whose_process_died_is_answered_with_an_error() {
    rt().block_on(async {
        for b in backends(Retention::default(), 1024).await {
            let store = LogEventStore::new(b.log.clone());
            let retry = ServerSseMessage::retry(Duration::from_secs(3));
            let live = store.store_event("live-call", &retry).await.unwrap();
            let dead = store.store_event("dead-call", &retry).await.unwrap();
            // The owner records DurableSessionManager writes when it binds a stream.
            let owner = |instance: &str| {
                bytes::Bytes::from(
                    serde_json::json!({"session": "s", "instance": instance, "request_id": 7})
                        .to_string(),
                )
            };
            let instance = b.log.instance().to_owned();
            b.log
                .set_meta("rmcp-req-live-call", owner(&instance))
                .await
                .unwrap();
            b.log
                .set_meta("rmcp-req-dead-call", owner("an-instance-that-died"))
                .await
                .unwrap();
            // The call still runs here: its replay stays open and silent.
            let mut s = store.replay_events_after(&live).await.unwrap();
            idle(&mut s).await;
            // Its process is gone: the replay answers the call with an error and ends.
            let mut s = store.replay_events_after(&dead).await.unwrap();
            let got = take(&mut s, 1).await.remove(0);
            let v = serde_json::to_value(got.message.as_deref().unwrap()).unwrap();
            assert_eq!(v["id"], 7, "{}", b.name);
            assert_eq!(v["error"]["code"], -32603);
            assert!(tokio::time::timeout(Duration::from_secs(5), s.next())
                .await
                .unwrap()
                .is_none());
        }
    });
}
