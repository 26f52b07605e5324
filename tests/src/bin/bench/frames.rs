//! The raw WebSocket echo: the wire's ceiling on this machine, and
//! (`tunefleet-bench frames`) what that ceiling is made of.
//!
//! Why the second: a job costs the fleet seven messages (docs/benchmarks.md),
//! and whether a faster fleet needs fewer messages, fewer frames or less JSON
//! decides what a next protocol must change. The echo answers it without the
//! master: the same connections send `per_frame` ~200-byte messages as one
//! frame (a JSON array), or as that many frames in one write, optionally
//! decoded on both sides, and we count messages per second.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

/// One echo run's rates.
pub(crate) struct Echo {
    /// Round trips of one burst (one write each way).
    pub(crate) bursts_per_s: f64,
    /// Messages carried both ways: `bursts_per_s * messages`.
    pub(crate) messages_per_s: f64,
}

/// How a burst of messages travels.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Burst {
    /// One frame: a JSON array of the messages (one message: the message).
    OneFrame,
    /// One frame per message, written together and echoed together.
    FramePerMessage,
}

/// `connections` clients, each sending a burst of `messages` ~200-byte
/// messages and waiting for all of it to come back, for `run_for`. With
/// `decode`, the server and the client each parse every frame as JSON (as a
/// peer that reads what it gets would); without it the bytes only travel.
pub(crate) async fn echo(
    connections: usize,
    run_for: Duration,
    messages: usize,
    burst: Burst,
    decode: bool,
) -> anyhow::Result<Echo> {
    let messages = messages.max(1);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
                    return;
                };
                // Every frame already read goes back in one write, as the
                // master answers a burst.
                while let Some(Ok(msg)) = ws.next().await {
                    let mut next = Some(msg);
                    while let Some(msg) = next.take() {
                        if decode && !decodes(&msg) {
                            return;
                        }
                        if msg.is_text() && ws.feed(msg).await.is_err() {
                            return;
                        }
                        if let Some(Some(Ok(more))) = ws.next().now_or_never() {
                            next = Some(more);
                        }
                    }
                    if ws.flush().await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let message = format!(r#"{{"type":"progress","pad":"{}"}}"#, "x".repeat(170));
    let (payload, frames) = match (burst, messages) {
        (Burst::OneFrame, 1) | (Burst::FramePerMessage, _) => (message, messages),
        (Burst::OneFrame, n) => (format!("[{}]", vec![message; n].join(",")), 1),
    };
    let mut sockets = Vec::new();
    for _ in 0..connections {
        sockets.push(
            tokio_tungstenite::connect_async(format!("ws://{addr}"))
                .await
                .context("connecting to the echo server")?
                .0,
        );
    }
    let started = Instant::now();
    let deadline = started + run_for;
    let mut clients = Vec::new();
    for mut ws in sockets {
        let payload = payload.clone();
        clients.push(tokio::spawn(async move {
            let mut trips = 0u64;
            'trips: while Instant::now() < deadline {
                for _ in 0..frames {
                    if ws
                        .feed(Message::Text(payload.clone().into()))
                        .await
                        .is_err()
                    {
                        break 'trips;
                    }
                }
                if ws.flush().await.is_err() {
                    break;
                }
                for _ in 0..frames {
                    match ws.next().await {
                        Some(Ok(msg)) if !decode || decodes(&msg) => {}
                        _ => break 'trips,
                    }
                }
                trips += 1;
            }
            trips
        }));
    }
    let mut total = 0;
    for client in clients {
        total += client.await.unwrap_or(0);
    }
    server.abort();
    let bursts_per_s = total as f64 / started.elapsed().as_secs_f64().max(1e-9);
    Ok(Echo {
        bursts_per_s,
        messages_per_s: bursts_per_s * messages as f64,
    })
}

fn decodes(msg: &Message) -> bool {
    match msg.to_text() {
        Ok(text) => serde_json::from_str::<serde_json::Value>(text).is_ok(),
        Err(_) => false,
    }
}

/// `tunefleet-bench frames`: the echo with bursts of 1 to 16 messages, as
/// one frame and as a frame each, bytes only and decoded, as a table.
pub(crate) async fn run(mut args: impl Iterator<Item = String>) -> anyhow::Result<()> {
    let (mut connections, mut seconds) = (100usize, 4u64);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--connections" => connections = value()?.parse()?,
            "--seconds" => seconds = value()?.parse()?,
            "--help" | "-h" => {
                println!("usage: tunefleet-bench frames [--connections N (100)] [--seconds S (4)]");
                return Ok(());
            }
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    println!(
        "raw WebSocket echo, {connections} connections, ~200-byte messages, {seconds} s per row"
    );
    println!("| messages per burst | sent as | JSON decoded | bursts/s | messages/s |");
    println!("| --- | --- | --- | --- | --- |");
    for decode in [false, true] {
        for (burst, label) in [
            (Burst::OneFrame, "one frame"),
            (Burst::FramePerMessage, "a frame each, one write"),
        ] {
            for messages in [1, 2, 4, 8, 16] {
                if messages == 1 && burst == Burst::FramePerMessage {
                    continue;
                }
                let run_for = Duration::from_secs(seconds);
                let rate = echo(connections, run_for, messages, burst, decode).await?;
                println!(
                    "| {messages} | {label} | {} | {:.0} | {:.0} |",
                    if decode { "both sides" } else { "no" },
                    rate.bursts_per_s,
                    rate.messages_per_s
                );
            }
        }
    }
    Ok(())
}
