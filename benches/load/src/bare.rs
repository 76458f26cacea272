//! The ceiling: bare hyper + serde_json answering the requests `echo_rps`
//! makes (issue 24 item 5), with nothing of MCP behind them: no log, no
//! session table, no auth, CORS, metrics or tracing. `initialize` hands out
//! a fresh session id, a notification gets 202, `tools/call` is parsed and
//! its `text` echoed back as JSON; every other request is a JSON-RPC error.
//! A GET is an SSE stream that stays open and silent, so that the memory of
//! an idle hyper connection is measured too. What `serve` pays per call or
//! per idle session on top of this is what its own layers cost.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::{
    body::{Frame, Incoming},
    Request, Response, StatusCode,
};
use serde_json::{json, Value};

/// Serves on a free loopback port until Ctrl-C (then exits cleanly, so that
/// a heap profiler sees the end); prints `listening on URL`.
pub async fn run() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    println!(
        "listening on http://{}/mcp",
        listener.local_addr().expect("local address")
    );
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = tokio::signal::ctrl_c() => return,
        };
        let Ok((tcp, _)) = accepted else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(tcp);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, hyper::service::service_fn(answer))
                .await;
        });
    }
}

type Body = BoxBody<Bytes, Infallible>;

/// One request: a POST's body read whole, parsed, answered; a GET's stream
/// opened and never written.
async fn answer(req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    if req.method() == hyper::Method::GET {
        let silent = futures_util::stream::pending::<Result<Frame<Bytes>, Infallible>>();
        let resp = Response::builder()
            .header("content-type", "text/event-stream")
            .body(StreamBody::new(silent).boxed())
            .expect("a valid response");
        return Ok(resp);
    }
    if req.method() != hyper::Method::POST {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, None, Bytes::new()));
    }
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(reply(StatusCode::BAD_REQUEST, None, Bytes::new())),
    };
    let msg: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => return Ok(reply(StatusCode::BAD_REQUEST, None, Bytes::new())),
    };
    let Some(id) = msg.get("id").cloned() else {
        return Ok(reply(StatusCode::ACCEPTED, None, Bytes::new()));
    };
    let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
    let (session, result) = match method {
        "initialize" => {
            static NEXT: AtomicU64 = AtomicU64::new(1);
            let sid = format!("bare-{}", NEXT.fetch_add(1, Ordering::Relaxed));
            let result = json!({"jsonrpc":"2.0","id":id,"result":{
                "protocolVersion":"2025-06-18","capabilities":{"tools":{}},
                "serverInfo":{"name":"bare","version":"1"}}});
            (Some(sid), result)
        }
        "tools/call" => {
            let text = msg
                .pointer("/params/arguments/text")
                .and_then(Value::as_str)
                .unwrap_or("");
            let result = json!({"jsonrpc":"2.0","id":id,"result":{
                "content":[{"type":"text","text":text}]}});
            (None, result)
        }
        _ => (
            None,
            json!({"jsonrpc":"2.0","id":id,"error":{"code":-32601,"message":"method not found"}}),
        ),
    };
    let bytes = Bytes::from(serde_json::to_vec(&result).expect("a Value encodes"));
    Ok(reply(StatusCode::OK, session, bytes))
}

fn reply(status: StatusCode, session: Option<String>, body: Bytes) -> Response<Body> {
    let mut b = Response::builder().status(status);
    if !body.is_empty() {
        b = b.header("content-type", "application/json");
    }
    if let Some(sid) = session {
        b = b.header("mcp-session-id", sid);
    }
    b.body(Full::new(body).boxed()).expect("a valid response")
}
