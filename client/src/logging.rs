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
    let no_frames = frame_guard(env.max_level_hint());
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

/// The filter that keeps the WebSocket libraries at `debug` or less, at no
/// level above what the `RUST_LOG` filter allows (`most`, its hint).
///
/// Why not simply `trace` by default: the subscriber's level hint is the
/// highest of its filters' hints, and it sets the `log` crate's maximum.
/// Letting everything through here made that `trace`, so every `log::trace!`
/// in tungstenite (several per frame) went through the `log` bridge and the
/// filter at run time, only to be dropped: ~5% of a worker connection's CPU
/// on the master.
fn frame_guard(most: Option<LevelFilter>) -> Targets {
    let most = most.unwrap_or(LevelFilter::TRACE);
    let frames = most.min(LevelFilter::DEBUG);
    Targets::new()
        .with_default(most)
        .with_target("tungstenite", frames)
        .with_target("tokio_tungstenite", frames)
}

#[cfg(test)]
mod tests;
