//! `mcp-resume`: serve MCP with resumable streams, and talk to such servers.

mod chaos;
mod client_cmds;
mod fleet;
mod gateway;
mod log_cmds;
mod serve;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "mcp-resume",
    version,
    about = "MCP over HTTP that never loses a message silently",
    long_about = "mcp-resume serves the Model Context Protocol over Streamable HTTP with resumable \
SSE and a cursor-safe SSE-to-WebSocket upgrade. Every server-to-client message is committed to a \
durable, ordered log before any client sees it; every connection only reads that log from a cursor; \
where continuity cannot be proven the server refuses loudly (409, 426, a close code) and never skips.\n\n\
Start a server:   mcp-resume serve\n\
Try it:           curl -si -X POST http://127.0.0.1:8080/mcp -H 'content-type: application/json' \\\n\
                    -H 'accept: application/json, text/event-stream' \\\n\
                    -d '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"curl\",\"version\":\"1\"}}}'",
    after_help = "Examples:\n  \
mcp-resume serve                                        # 127.0.0.1:8080/mcp, durable log in the data dir\n  \
mcp-resume call http://127.0.0.1:8080/mcp echo '{\"text\":\"hi\"}'\n  \
mcp-resume call http://127.0.0.1:8080/mcp emit '{\"count\":3}'   # 3 notifications; prints `session: ID` on stderr\n  \
mcp-resume tail http://127.0.0.1:8080/mcp --session ID --ws --from 0 --max-events 3   # read them over WebSocket\n  \
mcp-resume chaos --spawn --compare-legacy               # count silent gaps across upgrades and kills\n  \
mcp-resume log check ~/.local/share/mcp-resume/log      # verify a stopped server's disk log\n\n\
Each command's --help has more examples."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run an MCP server with the demo tools on a durable log.
    Serve(Box<serve::ServeCmd>),
    /// Put any MCP server behind the durable transport: a stdio one (one child process per
    /// session) or a Streamable HTTP one (--upstream URL, one upstream session per session).
    Gateway(Box<gateway::GatewayArgs>),
    /// Call one tool and print its result.
    Call(client_cmds::CallArgs),
    /// Print the session stream, one JSON object per line, resuming and checking every seq.
    Tail(client_cmds::TailArgs),
    /// The failover experiment: count silent gaps across upgrades, drops and kills.
    Chaos(Box<chaos::ChaosArgs>),
    /// A fleet on this machine: HAProxy (deploy/haproxy.cfg) in front of instances on one Redis.
    Fleet(fleet::FleetArgs),
    /// Inspect a disk log offline: `log check DIR [--repair]`.
    #[command(subcommand)]
    Log(log_cmds::LogCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Colour only for a person at a terminal: a log redirected to a file or a
    // journal gets plain text (and NO_COLOR turns it off anywhere).
    let ansi = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mcp-resume: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::run(*args).await,
            Command::Gateway(args) => gateway::run(*args).await,
            Command::Call(args) => client_cmds::call(args).await,
            Command::Tail(args) => client_cmds::tail(args).await,
            Command::Chaos(args) => chaos::chaos(*args).await,
            Command::Fleet(args) => fleet::run(args).await,
            // Offline and synchronous, with its own exit codes (0, 1, 2).
            Command::Log(cmd) => Ok(log_cmds::run(cmd)),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mcp-resume: {e}");
            ExitCode::FAILURE
        }
    }
}
