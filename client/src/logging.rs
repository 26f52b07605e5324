//! The log set-up of the tunefleet binaries (feature `logging`): the master,
//! the CLI and the worker log the same way, written once.

use std::io::IsTerminal;

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::prelude::*;

/// Logs to stderr, filtered by `RUST_LOG` if set, else at `default_level`.
/// Whatever `RUST_LOG` says, the WebSocket libraries never log below `debug`:
/// at `trace` they log whole frames, and frames carry secrets (`hello`'s
/// token, `register`'s join secret, session tokens).
pub fn init(default_level: &str) {
    let env = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let no_frames = Targets::new()
        .with_default(LevelFilter::TRACE)
        .with_target("tungstenite", LevelFilter::DEBUG)
        .with_target("tokio_tungstenite", LevelFilter::DEBUG);
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal()),
        )
        .with(env)
        .with(no_frames)
        .init();
}
