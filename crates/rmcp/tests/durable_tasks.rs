//! Durable tasks (MCP 2026-07-28's tasks extension) on the `conformance`
//! example, as separate processes: a task started on instance A is answered
//! by `tasks/get` on instance B after A is killed with `kill -9` (its result
//! if it was committed, else `failed` with `server-restarted`; never "not
//! found"), on one Redis and across a disk-log restart.

use std::time::{Duration, Instant};

use mcp_resume_testkit::RedisServer;
use serde_json::{json, Value};

mod common;
use common::mcp_http::stateless;
use common::proc::Instance;

/// A stateless-era request from a client that declares the tasks extension.
async fn call(url: &str, id: u64, method: &str, name: Option<&str>, params: Value) -> Value {
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    stateless(url, id, method, name, params, tasks).await
}

/// Starts `tool` as a task on `url`; its id.
async fn start(url: &str, tool: &str, arguments: Value) -> String {
    let v = call(
        url,
        1,
        "tools/call",
        Some(tool),
        json!({"name": tool, "arguments": arguments}),
    )
    .await;
    assert_eq!(v["result"]["resultType"], "task", "{v}");
    v["result"]["taskId"].as_str().unwrap().to_owned()
}

async fn get(url: &str, task: &str) -> Value {
    let v = call(url, 2, "tasks/get", Some(task), json!({"taskId": task})).await;
    assert!(
        v.get("result").is_some(),
        "never an error for a task that exists: {v}"
    );
    v["result"].clone()
}

/// Polls `tasks/get` on `url` until the task ends (at most `within`).
async fn settled(url: &str, task: &str, within: Duration) -> Value {
    let until = Instant::now() + within;
    loop {
        let t = get(url, task).await;
        if ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap_or_default())
        {
            return t;
        }
        assert!(Instant::now() < until, "the task did not settle: {t}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn a_task_outlives_the_kill_9_of_its_instance_on_redis() {
    let redis = RedisServer::start();
    let mut a = Instance::spawn_example("conformance", &redis.url);
    let b = Instance::spawn_example("conformance", &redis.url);
    common::rt().block_on(async {
        // One that finishes before A dies, one that cannot.
        let done = start(
            &a.url,
            "slow_compute",
            json!({"seconds": 0.2, "label": "quick"}),
        )
        .await;
        let running = start(
            &a.url,
            "slow_compute",
            json!({"seconds": 120, "label": "long"}),
        )
        .await;
        // Both readable on B at once (created durably), the long one working.
        assert_eq!(get(&b.url, &running).await["status"], "working");
        let t = settled(&b.url, &done, Duration::from_secs(10)).await;
        assert_eq!(t["status"], "completed", "{t}");
        a.kill9();
        // The result committed before the kill is still the answer.
        let t = get(&b.url, &done).await;
        assert_eq!(
            t["result"]["content"][0]["text"], "slow_compute(quick) done after 0.2s",
            "{t}"
        );
        // The one whose work died with A: failed, loudly, once A's heartbeat
        // has expired (about 10 s); never "not found".
        let t = settled(&b.url, &running, Duration::from_secs(30)).await;
        assert_eq!(t["status"], "failed", "{t}");
        assert_eq!(t["error"]["data"]["reason"], "server-restarted", "{t}");
        assert!(t.get("result").is_none(), "{t}");
        // And it stays so.
        assert_eq!(get(&b.url, &running).await["status"], "failed");
    });
}

#[test]
fn a_task_outlives_a_kill_9_and_restart_on_the_disk_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("disk:{}", dir.path().join("log").display());
    let mut first = Instance::spawn_example("conformance", &store);
    let rt = common::rt();
    let (running, asked) = rt.block_on(async {
        let running = start(&first.url, "slow_compute", json!({"seconds": 120})).await;
        // A task waiting for the client's input when the server dies.
        let asked = start(&first.url, "confirm_delete", json!({"filename": "x.txt"})).await;
        let until = Instant::now() + Duration::from_secs(10);
        while get(&first.url, &asked).await["status"] != "input_required" {
            assert!(Instant::now() < until, "confirm_delete never asked");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (running, asked)
    });
    first.kill9();
    let second = Instance::spawn_example("conformance", &store);
    rt.block_on(async {
        for task in [&running, &asked] {
            let t = get(&second.url, task).await;
            assert_eq!(t["status"], "failed", "{t}");
            assert_eq!(t["error"]["data"]["reason"], "server-restarted", "{t}");
        }
        // An answer to a dead task changes nothing; an unknown id is -32602.
        let ack = call(&second.url, 3, "tasks/update", Some(&asked),
            json!({"taskId": asked, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}})).await;
        assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
        assert_eq!(get(&second.url, &asked).await["status"], "failed");
        let unknown = "0".repeat(64);
        let v = call(&second.url, 4, "tasks/get", Some(&unknown), json!({"taskId": unknown})).await;
        assert_eq!(v["error"]["code"], -32602, "{v}");
    });
}
