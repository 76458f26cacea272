//! `mcp-resume call` and `mcp-resume tail`: the client library at the shell.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use mcp_resume_client::{ClientError, McpClient, ReaderOptions, Transport};
use serde_json::{json, Value};

/// Exit code: the stream cannot continue from the cursor (409, a gap, a duplicate).
pub const EXIT_DISCONTINUITY: u8 = 3;
/// Exit code: the session does not exist (404).
pub const EXIT_SESSION_GONE: u8 = 4;
/// Exit code: the tool ran and reported an error (`isError`).
pub const EXIT_TOOL_ERROR: u8 = 5;

/// Options every client command shares.
#[derive(Args, Debug)]
pub struct Target {
    /// The MCP endpoint, e.g. http://127.0.0.1:8080/mcp or https://host/mcp
    url: String,

    /// Use this existing session instead of initialising a new one.
    #[arg(long)]
    session: Option<String>,

    /// Send `Authorization: Bearer TOKEN`.
    #[arg(long, env = "MCP_RESUME_BEARER_TOKEN", hide_env_values = true)]
    bearer_token: Option<String>,

    /// Also trust the CA certificate(s) in this PEM file, for an https:// server
    /// whose certificate a private CA signed (wss:// upgrades too).
    #[arg(long, value_name = "PEM")]
    cacert: Option<PathBuf>,
}

impl Target {
    async fn client(&self) -> Result<McpClient, ClientError> {
        let mut client = McpClient::new(&self.url).bearer(self.bearer_token.clone());
        if let Some(ca) = &self.cacert {
            client = client.trust_ca_pem(ca)?;
        }
        match &self.session {
            Some(s) => Ok(client.with_session(s)),
            None => {
                let mut client = client;
                client.initialize().await?;
                eprintln!("session: {}", client.session_id().unwrap_or_default());
                Ok(client)
            }
        }
    }
}

#[derive(Args, Debug)]
#[command(
    after_help = "Prints the tool's result as JSON. Without --session a new session is \
initialised (its id is printed on stderr) and kept, so `tail --session ID` can read what the tool emits.\n\n\
Exit codes: 0 ok, 1 error, 2 bad usage, 4 session gone (404), 5 the tool reported an error.\n\n\
Examples:\n  mcp-resume call http://127.0.0.1:8080/mcp echo '{\"text\":\"hi\"}'\n  \
mcp-resume call https://mcp.example:8443/mcp echo '{\"text\":\"hi\"}' --cacert ca.pem"
)]
pub struct CallArgs {
    #[command(flatten)]
    target: Target,

    /// The tool's name.
    tool: String,

    /// The tool's arguments, as a JSON object.
    #[arg(default_value = "{}")]
    args: String,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Prints every event of the session stream as one JSON object per line \
({\"seq\":N,\"id\":\"N\",\"message\":{...}}), in order, forever: it reconnects on its own \
(exponential backoff with jitter, honouring the server's retry:), resumes from its cursor on any \
instance, and checks that every seq is the last plus one. With --ws it upgrades to WebSocket only \
when the server echoes the committed cursor, and falls back to SSE from the same cursor otherwise.\n\n\
Exit codes:\n  0  --max-events reached\n  1  other error (after --max-retries)\n  2  bad usage\n  \
3  discontinuity: the cursor cannot be honoured (409) or a gap or duplicate was seen; re-synchronise\n  \
4  the session is gone (404): initialise a new one\n\n\
With --task ID it reads a durable task's event stream instead (tasks/stream, SEP-2694; no session needed): one {\"seq\":N,\"type\":T,\"payload\":{...}} per line, --from as the cursor (the events after that seq), resumed with that cursor on any instance, until the task's terminal event (exit 0); a cursor the server no longer retains is exit 3.\n\n\
Examples:\n  mcp-resume tail http://127.0.0.1:8080/mcp --session $SID --ws --cursor-file /tmp/cursor\n  \
mcp-resume tail http://127.0.0.1:8080/mcp --task $TASK --from 41"
)]
pub struct TailArgs {
    #[command(flatten)]
    target: Target,

    /// Read over WebSocket (the cursor-safe upgrade), falling back to SSE when refused.
    #[arg(long)]
    ws: bool,

    /// Start after this seq (0: everything since the session began). Default: all retained.
    #[arg(long)]
    from: Option<u64>,

    /// Keep the cursor in this file; when it exists it wins over --from, so a restarted tail resumes.
    #[arg(long)]
    cursor_file: Option<PathBuf>,

    /// Stop after this many events.
    #[arg(long)]
    max_events: Option<u64>,

    /// Give up after this many reconnects in a row without progress. Default: never.
    #[arg(long)]
    max_retries: Option<u32>,

    /// Read this durable task's event stream (tasks/stream) instead of a session's.
    #[arg(long, value_name = "TASK_ID", conflicts_with_all = ["ws", "cursor_file"])]
    task: Option<String>,
}

fn exit_for(e: &ClientError) -> ExitCode {
    match e {
        ClientError::Discontinuity(_) => ExitCode::from(EXIT_DISCONTINUITY),
        ClientError::SessionGone => ExitCode::from(EXIT_SESSION_GONE),
        _ => ExitCode::FAILURE,
    }
}

fn report(e: &ClientError) -> ExitCode {
    eprintln!("mcp-resume: {e}");
    if let ClientError::Discontinuity(_) = e {
        eprintln!("mcp-resume: the stream cannot continue from this cursor; re-synchronise (re-list tools, resources, prompts)");
    }
    exit_for(e)
}

/// `call`.
pub async fn call(args: CallArgs) -> Result<ExitCode, String> {
    let arguments: Value =
        serde_json::from_str(&args.args).map_err(|e| format!("ARGS is not JSON: {e}"))?;
    if !arguments.is_object() {
        return Err("ARGS must be a JSON object".into());
    }
    let client = match args.target.client().await {
        Ok(c) => c,
        Err(e) => return Ok(report(&e)),
    };
    match client.call_tool(&args.tool, arguments).await {
        Ok(result) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&result).unwrap_or_default()
            );
            if result.get("isError").and_then(Value::as_bool) == Some(true) {
                return Ok(ExitCode::from(EXIT_TOOL_ERROR));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Ok(report(&e)),
    }
}

/// `tail`.
pub async fn tail(args: TailArgs) -> Result<ExitCode, String> {
    if let Some(task) = &args.task {
        return tail_task(&args, task).await;
    }
    let client = match args.target.client().await {
        Ok(c) => c,
        Err(e) => return Ok(report(&e)),
    };
    let mut opts = ReaderOptions::default();
    opts.transport = if args.ws {
        Transport::WebSocket
    } else {
        Transport::Sse
    };
    opts.from = args.from;
    opts.cursor_file = args.cursor_file.clone();
    opts.max_retries = args.max_retries;
    let mut reader = match client.reader(opts) {
        Ok(r) => r,
        Err(e) => return Ok(report(&e)),
    };
    let mut n = 0;
    let stdout = std::io::stdout();
    loop {
        if args.max_events.is_some_and(|max| n >= max) {
            return Ok(ExitCode::SUCCESS);
        }
        let ev = tokio::select! {
            ev = reader.next() => ev,
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        };
        match ev {
            Ok(ev) => {
                let line = json!({"seq": ev.seq, "id": ev.id, "message": ev.message});
                let mut out = stdout.lock();
                if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                    return Ok(ExitCode::SUCCESS); // the reader of our output went away
                }
                n += 1;
            }
            Err(e) => return Ok(report(&e)),
        }
    }
}

/// `tail --task`: a task's events, one JSON line each, to its terminal one.
async fn tail_task(args: &TailArgs, task: &str) -> Result<ExitCode, String> {
    let mut client = McpClient::new(&args.target.url).bearer(args.target.bearer_token.clone());
    if let Some(ca) = &args.target.cacert {
        client = match client.trust_ca_pem(ca) {
            Ok(c) => c,
            Err(e) => return Ok(report(&e)),
        };
    }
    let mut stream = match client.stream_task(task, args.from).await {
        Ok(s) => s,
        Err(e) => return Ok(report(&e)),
    };
    let mut n = 0;
    let stdout = std::io::stdout();
    loop {
        if args.max_events.is_some_and(|max| n >= max) {
            return Ok(ExitCode::SUCCESS);
        }
        let ev = tokio::select! {
            ev = stream.next() => ev,
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        };
        match ev {
            Ok(Some(ev)) => {
                let line = json!({"seq": ev.seq, "type": ev.kind, "payload": ev.payload});
                let mut out = stdout.lock();
                if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                    return Ok(ExitCode::SUCCESS);
                }
                n += 1;
            }
            Ok(None) => return Ok(ExitCode::SUCCESS),
            Err(e) => return Ok(report(&e)),
        }
    }
}
