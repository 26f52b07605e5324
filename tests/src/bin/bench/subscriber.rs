//! A subscriber speaking the protocol by hand: hello, subscribe (with
//! deltas, as the dashboard does), and the snapshot's text skipped instead of
//! decoded into views.
//!
//! Why: with 30,000 jobs held, decoding the snapshot leaves hundreds of
//! thousands of freed small blocks, which glibc's allocator consolidates at
//! this process's next large allocation (~15 ms). Inside a timed window that
//! is the bench's own cost, not the master's: a `strace` of the master shows
//! the event sent 0.15 ms after the assignment (docs/benchmarks.md). The
//! recycle sample and the scale run's dashboards both use it.

use anyhow::bail;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use tunefleet_shared::protocol::{FleetEvent, ServerMessage, WS_READ_BUFFER_BYTES};

use super::TOKEN;

pub(crate) struct RawSubscriber {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
}

impl RawSubscriber {
    /// Connected and subscribed, the snapshot received (and skipped).
    pub(crate) async fn subscribe(url: &str) -> anyhow::Result<Self> {
        let config = WebSocketConfig::default().read_buffer_size(WS_READ_BUFFER_BYTES);
        let (mut ws, _) = tokio_tungstenite::connect_async_with_config(
            format!("{url}/ws/client"),
            Some(config),
            false,
        )
        .await?;
        let hello = format!(r#"{{"id":1,"type":"hello","protocol":1,"token":"{TOKEN}"}}"#);
        ws.send(Message::Text(hello.into())).await?;
        // With deltas, as the dashboard and `watch` subscribe.
        ws.send(Message::Text(
            r#"{"id":2,"type":"subscribe","deltas":true}"#.into(),
        ))
        .await?;
        let mut subscriber = RawSubscriber { ws };
        while let Some(text) = subscriber.next_text().await? {
            if text.starts_with(r#"{"type":"snapshot""#) {
                return Ok(subscriber);
            }
            if text.starts_with(r#"{"type":"error""#) {
                bail!("subscribe refused: {text}");
            }
        }
        bail!("the master closed the connection before the snapshot")
    }

    /// The next text frame; `None` when the subscription ended.
    pub(crate) async fn next_text(&mut self) -> anyhow::Result<Option<Utf8Bytes>> {
        while let Some(msg) = self.ws.next().await {
            if let Message::Text(text) = msg? {
                return Ok(Some(text));
            }
        }
        Ok(None)
    }

    /// The next event, decoded.
    pub(crate) async fn next_event(&mut self) -> anyhow::Result<FleetEvent> {
        while let Some(text) = self.next_text().await? {
            if let ServerMessage::Event { event, .. } = serde_json::from_str(&text)? {
                return Ok(event);
            }
        }
        bail!("the subscription ended")
    }
}
