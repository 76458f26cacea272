//! The Rust client: a session, a tool call, and the session stream read
//! over the cursor-safe WebSocket upgrade, every seq checked
//! (docs/client-author.md).
//!
//! ```sh
//! cargo run -p mcp-resume-client --example read_session -- http://127.0.0.1:8080/mcp
//! ```

use mcp_resume_client::{ClientError, McpClient, ReaderOptions, Transport};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), ClientError> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:8080/mcp".into());
    let mut client = McpClient::new(url); // .bearer(Some(token)), .trust_ca_pem("ca.pem")?
    client.initialize().await?;
    println!("session {}", client.session_id().unwrap_or_default());
    // The demo server's `emit`: 5 notifications on the session stream.
    let result = client.call_tool("emit", json!({"count": 5})).await?;
    println!("emit answered {result}");

    let mut options = ReaderOptions::default();
    // Upgrade only when the server echoes the committed cursor; else SSE
    // from the same cursor.
    options.transport = Transport::WebSocket;
    // After seq 0: everything since the session began. `cursor_file` keeps
    // the cursor, so a restarted program resumes where it stopped.
    options.from = Some(0);
    let mut reader = client.reader(options)?;
    for _ in 0..5 {
        // In order, with no gap and no duplicate, across reconnects; or an
        // error saying why not (ClientError::Discontinuity: re-synchronise).
        let event = reader.next().await?;
        println!("seq {:?}: {}", event.seq, event.message);
    }
    println!("read over WebSocket: {}", reader.on_websocket());
    client.end().await?; // DELETE: the session ends; its id answers 404 from now on
    Ok(())
}
