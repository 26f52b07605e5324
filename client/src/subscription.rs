//! Subscribing: the snapshot that follows `subscribed`, then every update in
//! order, including those a request read while waiting for its reply.

use tokio::time::Instant;
use tunefleet_shared::protocol::{
    close_code, ClientCommand, FleetEvent, FleetSnapshot, ReplyBody, ServerMessage,
};

use crate::errors::{summarize, unexpected};
use crate::{Client, ClientError, NO_STATUS};

/// One item of the subscription stream.
#[derive(Clone, Debug, PartialEq)]
pub enum Update {
    /// A full picture of the fleet. Sent after `subscribe`, and again whenever
    /// the master decides this subscriber fell behind: replace, don't merge.
    Snapshot(u64, FleetSnapshot),
    /// One change, numbered.
    Event(u64, FleetEvent),
}

impl Client {
    /// Subscribes and returns the snapshot that follows the `subscribed` reply,
    /// with its seq. Updates read before that snapshot are stale and dropped.
    /// Every change of a job comes as a whole `job_updated` view.
    pub async fn subscribe(&mut self) -> Result<(u64, FleetSnapshot), ClientError> {
        self.subscribe_with(false).await
    }

    /// [`Client::subscribe`], for a [`FleetView`](crate::FleetView) mirror: a job the mirror
    /// already has is updated by `job_changed` deltas (no name, workload or
    /// creation time), and a worker by `worker_changed` (its job and count),
    /// which [`FleetView::apply_event`](crate::FleetView::apply_event) applies. A master
    /// from before deltas ignores the request and sends whole views.
    pub async fn subscribe_with_deltas(&mut self) -> Result<(u64, FleetSnapshot), ClientError> {
        self.subscribe_with(true).await
    }

    async fn subscribe_with(&mut self, deltas: bool) -> Result<(u64, FleetSnapshot), ClientError> {
        match self.request(ClientCommand::Subscribe { deltas }).await? {
            ReplyBody::Subscribed => {}
            other => return Err(unexpected("subscribed", &other)),
        }
        let mut snapshot = None;
        while let Some(msg) = self.pending.pop_front() {
            if let ServerMessage::Snapshot { seq, snapshot: s } = msg {
                snapshot = Some((seq, s));
                break;
            }
        }
        if let Some(found) = snapshot {
            return Ok(found);
        }
        let deadline = Instant::now() + self.request_timeout;
        loop {
            match self.recv(Some((deadline, "subscribe"))).await? {
                Some(ServerMessage::Snapshot { seq, snapshot }) => return Ok((seq, snapshot)),
                Some(ServerMessage::Error { code, message, .. }) => {
                    return Err(ClientError::Server { code, message })
                }
                Some(ServerMessage::Shutdown { reason }) => {
                    return Err(ClientError::Shutdown { reason })
                }
                Some(other) => {
                    tracing::debug!(got = %summarize(&other), "ignoring message before snapshot")
                }
                None => {
                    return Err(ClientError::Transport(
                        "the master closed the connection before sending the snapshot".into(),
                    ))
                }
            }
        }
    }

    /// The next snapshot or event of the subscription. `Ok(None)` when the
    /// master closed the connection normally; errors for everything else,
    /// including a dead connection (see [`KEEPALIVE`](crate::KEEPALIVE)). Waits without limit
    /// otherwise. Cancel-safe: dropping the future loses no message.
    pub async fn next_update(&mut self) -> Result<Option<Update>, ClientError> {
        loop {
            let msg = match self.pending.pop_front() {
                Some(msg) => msg,
                None => match self.recv(None).await {
                    Ok(Some(msg)) => msg,
                    Ok(None) => return Ok(None),
                    Err(ClientError::Closed { code, .. })
                        if code == close_code::NORMAL || code == NO_STATUS =>
                    {
                        return Ok(None)
                    }
                    Err(e) => return Err(e),
                },
            };
            match msg {
                ServerMessage::Snapshot { seq, snapshot } => {
                    return Ok(Some(Update::Snapshot(seq, snapshot)))
                }
                ServerMessage::Event { seq, event } => return Ok(Some(Update::Event(seq, event))),
                ServerMessage::Shutdown { reason } => return Err(ClientError::Shutdown { reason }),
                ServerMessage::Error {
                    id: None,
                    code,
                    message,
                } => return Err(ClientError::Server { code, message }),
                other => {
                    tracing::debug!(got = %summarize(&other), "ignoring unsolicited message")
                }
            }
        }
    }
}
