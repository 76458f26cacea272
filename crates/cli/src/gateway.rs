//! `mcp-resume gateway`: any MCP server that speaks stdio behind the
//! durable, resumable transport, one child process per session.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use mcp_resume_server::backend::stdio::StdioBackend;

use crate::serve::{self, ServeArgs};

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
mcp-resume gateway -- npx -y @modelcontextprotocol/server-everything stdio\n  \
mcp-resume gateway --store redis://127.0.0.1:6379/0 --env API_KEY -- python server.py\n  \
mcp-resume gateway --listen 127.0.0.1:0 --max-children 64 -- ./my-mcp-server --flag\n\n\
Each session gets its own child, started on `initialize` with the client's params. Everything\n\
the child writes is committed to the session's log before any client sees it, so SSE resumes,\n\
request streams and the WebSocket upgrade work as with `serve`; the client's requests,\n\
notifications and answers to the child's sampling and elicitation requests go to its stdin.\n\
The child's stderr goes to this log with the session id. A child that exits ends its session\n\
(calls in flight get a JSON-RPC error, then 404). After a restart, even `kill -9`, a session's\n\
child is started again on its next message and initialized with the stored params; calls that\n\
were in flight end with an error.")]
pub struct GatewayArgs {
    #[command(flatten)]
    serve: ServeArgs,

    /// Pass this environment variable through to the children (repeatable).
    /// They get only PATH, HOME and these.
    #[arg(long = "env", value_name = "NAME")]
    env: Vec<String>,

    /// Most child processes at once; a new session beyond gets 429.
    #[arg(long, default_value_t = 256)]
    max_children: usize,

    /// The MCP server to run for each session, after `--`: CMD [ARGS...].
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Runs the gateway until SIGTERM or Ctrl-C.
pub async fn run(args: GatewayArgs) -> Result<ExitCode, String> {
    let Some((program, rest)) = args.command.split_first() else {
        return Err("gateway needs the server to run after --, e.g. -- python server.py".into());
    };
    let mut env = Vec::new();
    for name in &args.env {
        match std::env::var(name) {
            Ok(v) => env.push((name.clone(), v)),
            Err(_) => {
                return Err(format!(
                    "--env {name}: no such variable in this environment"
                ))
            }
        }
    }
    let backend = StdioBackend::new(
        program.clone(),
        rest.to_vec(),
        env,
        args.max_children.max(1),
    );
    serve::run_with(args.serve, Some(Arc::new(backend))).await
}
