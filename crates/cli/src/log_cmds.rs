//! `mcp-resume log check DIR [--repair]`: the disk log's offline check
//! (docs/protocol.md 6.1), for an operator who suspects damaged files.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use mcp_resume_log::DiskLog;

/// `mcp-resume log ...`.
#[derive(Subcommand)]
pub enum LogCommand {
    /// Verify a disk log directory offline: journal and table checksums (every record and event
    /// is read), every stream contiguous from floor to head, and every head against the
    /// committed-heads record. Exit 0 clean, 1 damaged, 2 unreadable.
    #[command(after_help = "Examples:\n  \
mcp-resume log check ~/.local/share/mcp-resume/log\n  \
mcp-resume log check /var/lib/mcp-resume/log --repair   # then serve it again\n\n\
Stop the server first: a running server holds the directory's lock (exit 2).\n\
--repair keeps every intact event. Committed events that are gone become a lost range: the\n\
stream keeps its head (no seq is ever handed out twice) and a reader that needs them gets\n\
409 data-lost. A session lost entirely ends (404). See docs/protocol.md 6.1.")]
    Check(CheckArgs),
}

/// Flags of `log check`.
#[derive(Args)]
pub struct CheckArgs {
    /// The log directory (`serve`'s default: ~/.local/share/mcp-resume/log; --store disk:PATH).
    pub dir: PathBuf,
    /// Make a damaged directory servable under docs/protocol.md 6.1, keeping what is intact;
    /// exit 0 when it then opens.
    #[arg(long)]
    pub repair: bool,
}

/// Runs a `log` subcommand.
pub fn run(cmd: LogCommand) -> ExitCode {
    match cmd {
        LogCommand::Check(args) => check(args),
    }
}

fn check(args: CheckArgs) -> ExitCode {
    let dir = args.dir.display();
    let report = match DiskLog::check(&args.dir, args.repair) {
        Ok(r) => r,
        Err(e) => {
            println!("{dir}: unreadable: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "{dir}: {} sessions, {} streams, {} events read",
        report.sessions, report.streams, report.events
    );
    for d in &report.damage {
        println!("damaged: {d}");
    }
    for p in &report.problems {
        println!("inconsistent: {p}");
    }
    for r in &report.repaired {
        println!("repaired: {r}");
    }
    if report.is_clean() && report.repaired.is_empty() {
        println!("clean");
        ExitCode::SUCCESS
    } else if args.repair && report.problems.is_empty() {
        println!("servable: what is lost is refused loudly (409 data-lost), nothing is renumbered");
        ExitCode::SUCCESS
    } else {
        println!(
            "damaged{}",
            if args.repair {
                ""
            } else {
                " (--repair makes it servable)"
            }
        );
        ExitCode::from(1)
    }
}
