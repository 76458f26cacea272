//! `mcp-resume gateway`: an existing MCP server behind the durable,
//! resumable transport: one that speaks stdio (one child process per
//! session, `-- CMD`) or a remote one that speaks Streamable HTTP (one
//! upstream session per session, `--upstream URL`).

use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use mcp_resume_server::backend::stdio::{PoolLimits, StdioBackend};
use mcp_resume_server::backend::upstream::UpstreamBackend;
use mcp_resume_server::backend::Backend;

use crate::serve::{self, ServeArgs};

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
mcp-resume gateway -- npx -y @modelcontextprotocol/server-everything stdio\n  \
mcp-resume gateway --store redis://127.0.0.1:6379/0 --env API_KEY -- python server.py\n  \
mcp-resume gateway --listen 127.0.0.1:0 --max-children 64 -- ./my-mcp-server --flag\n  \
mcp-resume gateway --upstream http://127.0.0.1:3001/mcp\n  \
mcp-resume gateway --upstream https://mcp.example.com/mcp --upstream-header 'Authorization: Bearer T'\n\n\
With `-- CMD`, each session gets its own child, started on `initialize` with the client's params.\n\
Everything the child writes is committed to the session's log before any client sees it, so SSE\n\
resumes, request streams and the WebSocket upgrade work as with `serve`; the client's requests,\n\
notifications and answers to the child's sampling and elicitation requests go to its stdin.\n\
The child's stderr goes to this log with the session id. A child that exits ends its session\n\
(calls in flight get a JSON-RPC error, then 404). After a restart, even `kill -9`, a session's\n\
child is started again on its next message and initialized with the stored params; calls that\n\
were in flight end with an error.\n\n\
With `--upstream URL` (instead of `-- CMD`), each session gets its own session on that MCP\n\
Streamable HTTP server, with the same guarantees: the client's messages are POSTed to it in\n\
order, everything it answers or sends (SSE bodies, its GET stream) is committed first. A dropped\n\
upstream stream is resumed with Last-Event-ID; an upstream that cannot be reached answers the\n\
call with a JSON-RPC error (data.reason upstream-unreachable or upstream-lost), and a 404 for\n\
the upstream session ends the session. `--upstream-header` adds headers for its authorization.\n\n\
Both MCP eras on one URL: a 2025 client initializes a session as above; a 2026-07-28 client's\n\
stateless requests (no session) go to the upstream as stateless requests with their Mcp-Method\n\
and Mcp-Name headers, or, with `-- CMD`, to a pool of children initialized as 2025 sessions with\n\
the capabilities each request declares (children shared by requests that declare the same).")]
#[command(
    override_usage = "mcp-resume gateway [OPTIONS] -- CMD [ARGS...]   (a stdio server, one child a session)\n       \
mcp-resume gateway [OPTIONS] --upstream URL    (a Streamable HTTP server)"
)]
#[command(group(
    clap::ArgGroup::new("backend")
        .required(true)
        .args(["upstream", "command"]),
))]
pub struct GatewayArgs {
    /// Serve each session from a session on this MCP Streamable HTTP
    /// endpoint (http:// or https://) instead of a child process.
    #[arg(long, env = "MCP_RESUME_UPSTREAM", value_name = "URL", conflicts_with_all = ["env", "max_children", "child_init_secs", "command"], help_heading = "Gateway")]
    upstream: Option<String>,

    /// A header sent with every request to the upstream, 'Name: value'
    /// (repeatable), e.g. 'Authorization: Bearer T'. In the environment, one
    /// header a line.
    #[arg(
        long,
        env = "MCP_RESUME_UPSTREAM_HEADERS",
        hide_env_values = true,
        value_delimiter = '\n',
        value_name = "'NAME: VALUE'",
        value_parser = header,
        help_heading = "Gateway"
    )]
    upstream_header: Vec<(String, String)>,

    /// Pass this environment variable through to the children (repeatable).
    /// They get only PATH, HOME and these.
    #[arg(
        long = "env",
        env = "MCP_RESUME_CHILD_ENV",
        value_delimiter = ',',
        value_name = "NAME",
        help_heading = "Gateway"
    )]
    env: Vec<String>,

    /// Most child processes at once; a new session beyond gets 429.
    #[arg(
        long,
        env = "MCP_RESUME_MAX_CHILDREN",
        default_value_t = 256,
        help_heading = "Gateway"
    )]
    max_children: usize,

    /// Seconds a new session's child waits for the client's initialize
    /// before it is stopped and the session ended (a stateless request or
    /// a client that went away never holds a child for long).
    #[arg(long, env = "MCP_RESUME_CHILD_INIT_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Gateway")]
    child_init_secs: u64,

    /// Most children of the stateless pool (2026-07-28 requests to `-- CMD`),
    /// within --max-children; the least recently used idle one gives way.
    #[arg(long, env = "MCP_RESUME_POOL_CHILDREN", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Gateway")]
    pool_children: u64,

    /// Most pool children one principal's requests hold at once (with
    /// credentials configured); past it its own least recently used idle
    /// one gives way, or 429.
    #[arg(long, env = "MCP_RESUME_POOL_CHILDREN_PER_PRINCIPAL", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Gateway")]
    pool_children_per_principal: u64,

    /// Pool children started per second on average (a fork and an
    /// initialize each); a request that needs one sooner gets 429 with
    /// Retry-After.
    #[arg(
        long,
        env = "MCP_RESUME_POOL_STARTS_PER_SEC",
        default_value_t = 2.0,
        help_heading = "Gateway"
    )]
    pool_starts_per_sec: f64,

    /// Pool children started at once before --pool-starts-per-sec applies.
    #[arg(long, env = "MCP_RESUME_POOL_START_BURST", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..), help_heading = "Gateway")]
    pool_start_burst: u32,

    /// Calls in flight on one pool child; one more gets 429.
    #[arg(long, env = "MCP_RESUME_POOL_CALLS_PER_CHILD", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Gateway")]
    pool_calls_per_child: u64,

    /// Messages waiting for one pool child's stdin (a child that stops
    /// reading it); a request beyond gets 429.
    #[arg(long, env = "MCP_RESUME_POOL_STDIN_QUEUE", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Gateway")]
    pool_stdin_queue: u64,

    /// The MCP server to run for each session, after `--`: CMD [ARGS...]
    /// (or --upstream URL instead).
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,

    #[command(flatten)]
    serve: ServeArgs,
}

/// Parses `--upstream-header 'Name: value'`.
fn header(s: &str) -> Result<(String, String), String> {
    match s.split_once(':') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(format!(
            "expected 'Name: value' (e.g. 'Authorization: Bearer T'), got {s:?}"
        )),
    }
}

/// Runs the gateway until SIGTERM or Ctrl-C.
pub async fn run(args: GatewayArgs) -> Result<ExitCode, String> {
    let backend: Arc<dyn Backend> = match &args.upstream {
        Some(url) => Arc::new(
            UpstreamBackend::new(url, args.upstream_header.clone()).map_err(|e| e.to_string())?,
        ),
        None if !args.upstream_header.is_empty() => {
            return Err("--upstream-header needs --upstream URL".into())
        }
        None => Arc::new(stdio(&args)?),
    };
    // Its log lines say they are the gateway's, not `serve`'s.
    let span = tracing::info_span!("gateway");
    tracing::Instrument::instrument(
        serve::run_with(args.serve, serve::Sessions::Gateway(backend)),
        span,
    )
    .await
}

/// The stdio backend of `-- CMD ARGS`.
fn stdio(args: &GatewayArgs) -> Result<StdioBackend, String> {
    let Some((program, rest)) = args.command.split_first() else {
        return Err(
            "gateway needs the server to run after --, e.g. -- python server.py, or --upstream URL"
                .into(),
        );
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
    Ok(StdioBackend::new(
        program.clone(),
        rest.to_vec(),
        env,
        args.max_children.max(1),
    )
    .with_init_grace(std::time::Duration::from_secs(args.child_init_secs))
    .with_pool_limits(pool_limits(args)?))
}

/// The stateless pool's limits from the `--pool-*` flags.
fn pool_limits(args: &GatewayArgs) -> Result<PoolLimits, String> {
    if !(args.pool_starts_per_sec.is_finite() && args.pool_starts_per_sec > 0.0) {
        return Err(format!(
            "--pool-starts-per-sec must be above 0, got {}",
            args.pool_starts_per_sec
        ));
    }
    let mut l = PoolLimits::default();
    l.children = args.pool_children as usize;
    l.per_principal = args.pool_children_per_principal as usize;
    l.starts_per_sec = args.pool_starts_per_sec;
    l.start_burst = args.pool_start_burst;
    l.calls_per_child = args.pool_calls_per_child as usize;
    l.stdin_queue = args.pool_stdin_queue as usize;
    Ok(l)
}
