//! Resumable task event streams (SEP-2694) across instances and crashes:
//! two `conformance` example processes on one Redis, a task that emits its
//! events on A read by the Rust client (`McpClient::stream_task`), cut every
//! 100 events and resumed alternately on A and B; and A killed with
//! `kill -9` mid-task, B's stream ending with one terminal `failed`.

use std::time::Duration;

use mcp_resume_client::{McpClient, TaskEvent};
use mcp_resume_testkit::RedisServer;
use serde_json::{json, Value};

mod common;
use common::mcp_http::stateless;
use common::proc::Instance;

/// Starts `stream_events {count, interval_ms}` as a task on `url`; its id.
async fn start(url: &str, count: u64, interval_ms: u64) -> String {
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let params =
        json!({"name": "stream_events", "arguments": {"count": count, "interval_ms": interval_ms}});
    let v = stateless(url, 1, "tools/call", Some("stream_events"), params, tasks).await;
    assert_eq!(v["result"]["resultType"], "task", "{v}");
    v["result"]["taskId"].as_str().unwrap().to_owned()
}

/// Reads at most `max` events (all with `None`) of `task` after `after` on
/// `url`, within `within`.
async fn read(
    url: &str,
    task: &str,
    after: Option<u64>,
    max: Option<usize>,
    within: Duration,
) -> (Vec<TaskEvent>, bool) {
    let client = McpClient::new(url);
    let mut stream = client.stream_task(task, after).await.expect("tasks/stream");
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    while max.is_none_or(|m| got.len() < m) {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Ok(Some(e))) => got.push(e),
            Ok(Ok(None)) => return (got, true),
            Ok(Err(e)) => panic!("the stream of {task} failed: {e}"),
            Err(_) => panic!("the stream of {task} hung after {:?}", got.last()),
        }
    }
    (got, false)
}

#[test]
fn a_task_stream_cut_every_100_events_and_resumed_on_either_instance_loses_nothing() {
    let redis = RedisServer::start();
    let a = Instance::spawn_example("conformance", &redis.url);
    let b = Instance::spawn_example("conformance", &redis.url);
    common::rt().block_on(async {
        let task = start(&a.url, 1000, 1).await;
        let mut all: Vec<TaskEvent> = Vec::new();
        let mut after = None;
        for round in 0.. {
            let url = if round % 2 == 0 { &a.url } else { &b.url };
            let (got, ended) = read(url, &task, after, Some(100), Duration::from_secs(60)).await;
            all.extend(got);
            after = all.last().map(|e| e.seq);
            if ended {
                break;
            }
            assert!(round < 40, "the stream never ended");
        }
        // seq 0 the start, 1 ..= 1000 the work's events, 1001 the end:
        // every one once, in order, across ten cuts and both instances.
        let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (0..=1001).collect::<Vec<_>>());
        assert_eq!(all[0].kind, "dev.mcp-resume/task/working");
        for (i, e) in all[1..=1000].iter().enumerate() {
            assert_eq!(e.kind, "com.example.count");
            assert_eq!(e.payload["n"], i as u64 + 1, "{e:?}");
        }
        let end = &all[1001];
        assert_eq!(end.kind, "dev.mcp-resume/task/completed", "{end:?}");
        assert_eq!(
            end.payload["result"]["content"][0]["text"],
            "streamed 1000 events"
        );
        // Read again from the start on B: the same events.
        let (again, ended) = read(&b.url, &task, None, None, Duration::from_secs(30)).await;
        assert!(ended);
        assert_eq!(again, all);
    });
}

#[test]
fn a_killed_owner_ends_the_task_stream_on_the_other_instance_with_one_failure() {
    let redis = RedisServer::start();
    let mut a = Instance::spawn_example("conformance", &redis.url);
    let b = Instance::spawn_example("conformance", &redis.url);
    common::rt().block_on(async {
        let task = start(&a.url, 100_000, 20).await;
        let client = McpClient::new(&b.url);
        let mut stream = client.stream_task(&task, None).await.unwrap();
        let mut got: Vec<TaskEvent> = Vec::new();
        while got.len() < 10 {
            got.push(stream.next().await.unwrap().unwrap());
        }
        a.kill9();
        // B's reader sees the owner's heartbeat expire (about 10 s), fails
        // the task once, and its stream ends with that failure.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
        loop {
            match tokio::time::timeout_at(deadline, stream.next()).await {
                Ok(Ok(Some(e))) => got.push(e),
                Ok(Ok(None)) => break,
                other => panic!("the stream did not end after the kill: {other:?}"),
            }
        }
        let seqs: Vec<u64> = got.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (0..got.len() as u64).collect::<Vec<_>>());
        let terminal: Vec<&TaskEvent> = got.iter().filter(|e| e.is_terminal()).collect();
        assert_eq!(terminal.len(), 1, "{terminal:?}");
        let end = got.last().unwrap();
        assert_eq!(end.kind, "dev.mcp-resume/task/failed", "{end:?}");
        assert_eq!(
            end.payload["error"]["data"]["reason"], "server-restarted",
            "{end:?}"
        );
        // Read again: the same one failure, and tasks/get agrees.
        let (again, ended) = read(&b.url, &task, None, None, Duration::from_secs(10)).await;
        assert!(ended);
        assert_eq!(again, got);
        let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
        let v: Value = stateless(
            &b.url,
            2,
            "tasks/get",
            Some(&task),
            json!({"taskId": task}),
            tasks,
        )
        .await;
        assert_eq!(v["result"]["status"], "failed", "{v}");
    });
}
