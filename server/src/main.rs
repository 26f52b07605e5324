//! `tunefleet`: the master (`serve`) and the client commands for automation.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tunefleet_server::commands::{self, ClientCli};
use tunefleet_server::{export_trace, launch, serve};

/// mimalloc, not glibc's allocator: the master's threads free what others
/// allocated (events built on the core, dropped by connection tasks), which
/// glibc handles with locks and arena hops; mimalloc cut the master's CPU
/// per job by 10–22% (docs/benchmarks.md). Built without transparent huge
/// pages (the workspace's `no_thp`; see Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "tunefleet",
    version,
    about = "Distributed auto-tuning farm for Apache TVM"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the master: job queue, durable state, WebSocket endpoints, dashboard.
    Serve(serve::ServeArgs),
    #[command(flatten)]
    Client(ClientCli),
    /// Print the state database's event log as JSON lines (works offline).
    ExportTrace(export_trace::ExportTraceArgs),
    /// Start workers through a cluster's job manager (Slurm).
    Launch(launch::LaunchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The master logs at info; client commands stay quiet unless asked (RUST_LOG).
    let default_level = if matches!(cli.command, Cmd::Serve(_)) {
        "info"
    } else {
        "warn"
    };
    serve::init_logging(default_level);
    let result = match tokio::runtime::Runtime::new() {
        Ok(runtime) => match cli.command {
            Cmd::Serve(args) => runtime.block_on(serve::run(args)),
            Cmd::Client(command) => runtime.block_on(command.run()),
            Cmd::ExportTrace(args) => export_trace::run(args),
            Cmd::Launch(args) => args.run(),
        },
        Err(e) => Err(e.into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => commands::report_error(&err),
    }
}
