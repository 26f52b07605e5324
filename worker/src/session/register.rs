//! Opening the socket and registering: what a worker says first, and which
//! refusals end it for good (a protocol mismatch, a refused secret, an
//! untrusted certificate) rather than being retried with backoff.

use std::time::Duration;

use tokio::time::Instant;
use tokio_tungstenite::tungstenite;
use tracing::{debug, error, info, warn};
use tunefleet_shared::protocol::{
    close_code, MasterMessage, WorkerHello, WorkerMessage, PROTOCOL_VERSION,
};

use super::{Worker, WorkerError};
use tunefleet_client::{CloseInfo, Received, Transport, TransportError};

/// Limit for opening the socket, and then for the `registered` answer.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The least time given to opening a socket, whatever the silence limit.
const MIN_OPEN_TIMEOUT: Duration = Duration::from_secs(2);

/// Why connecting or registering did not give a session.
pub(super) enum Attempt {
    Retry(String),
    Fatal(WorkerError),
}

impl Worker {
    pub(super) fn hello(&self) -> WorkerHello {
        let backend = &self.config.backend;
        WorkerHello {
            protocol: PROTOCOL_VERSION,
            worker_id: self.worker_id.clone(),
            name: self.config.name.clone(),
            target: self.config.target.clone(),
            backend: backend.name().to_string(),
            tvm_version: backend.tvm_version(),
            secret: self.config.secret.clone(),
            // Absent for one: what a master from before slots expects.
            slots: (self.config.slots > 1).then_some(self.config.slots),
            device: self.config.device.clone(),
        }
    }

    /// How long opening a socket may take: no longer than the silence
    /// that ends a session (a master cut off drops the SYN as silently),
    /// once a master said what that is, so that a worker with several URLs
    /// is not held by one that cannot answer.
    fn open_timeout(&self) -> Duration {
        self.silence_limit.map_or(HANDSHAKE_TIMEOUT, |limit| {
            limit.clamp(MIN_OPEN_TIMEOUT, HANDSHAKE_TIMEOUT)
        })
    }

    pub(super) async fn connect_and_register(&mut self) -> Result<(Transport, String), Attempt> {
        let mut conn = match tokio::time::timeout(
            self.open_timeout(),
            Transport::connect(&self.urls[self.current], self.tls.as_ref()),
        )
        .await
        {
            Err(_) => return Err(Attempt::Retry("timed out opening the WebSocket".into())),
            Ok(Err(e)) => return Err(connect_failure(e)),
            Ok(Ok(conn)) => conn,
        };
        if let Err(e) = conn.send(&WorkerMessage::Register(self.hello())).await {
            return Err(Attempt::Retry(format!("sending register: {e}")));
        }
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        loop {
            let Ok(received) = tokio::time::timeout_at(deadline, conn.recv()).await else {
                return Err(Attempt::Retry("no `registered` answer in time".into()));
            };
            match received {
                Ok(Received::Message(MasterMessage::Registered {
                    token,
                    session,
                    matching_jobs,
                    heartbeat_timeout_ms,
                })) => {
                    self.stats.registrations += 1;
                    let silence = self
                        .config
                        .heartbeat_timeout
                        .or(heartbeat_timeout_ms.map(Duration::from_millis));
                    if let Some(limit) = silence {
                        conn.set_silence_limit(limit);
                        self.silence_limit = Some(limit);
                    }
                    info!(
                        %session, matching_jobs,
                        silence_limit_ms = silence.map(|d| d.as_millis() as u64),
                        "registered with the master"
                    );
                    if matching_jobs == 0 {
                        warn!(
                            target = %self.config.target,
                            "no open job matches this worker's target right now"
                        );
                    }
                    return Ok((conn, token));
                }
                Ok(Received::Message(MasterMessage::Error { code, message })) => {
                    warn!(?code, %message, "master answered register with an error");
                }
                Ok(Received::Message(MasterMessage::Shutdown { reason })) => {
                    return Err(Attempt::Retry(format!("master is shutting down: {reason}")));
                }
                Ok(Received::Message(other)) => {
                    debug!(
                        ?other,
                        "ignoring a message that arrived before `registered`"
                    );
                }
                Ok(Received::Closed(close)) => {
                    return Err(self.closed_while_registering(close.as_ref()))
                }
                Err(e) if e.is_recoverable() => warn!(error = %e, "ignoring a bad message"),
                Err(e) => return Err(Attempt::Retry(e.to_string())),
            }
        }
    }

    fn closed_while_registering(&self, close: Option<&CloseInfo>) -> Attempt {
        let Some(close) = close else {
            return Attempt::Retry("the master closed the connection during registration".into());
        };
        if let Some(fatal) = fatal_close(close) {
            return Attempt::Fatal(fatal);
        }
        if close.code == close_code::NO_MATCHING_JOBS {
            error!(
                target = %self.config.target, reason = %close.reason,
                "the master has no job for this worker's target; will retry"
            );
        }
        Attempt::Retry(format!("the master closed the connection ({close})"))
    }
}

/// Close codes after which retrying cannot help.
pub(super) fn fatal_close(close: &CloseInfo) -> Option<WorkerError> {
    match close.code {
        close_code::PROTOCOL_MISMATCH => Some(WorkerError::ProtocolMismatch {
            ours: PROTOCOL_VERSION,
            reason: close.reason.clone(),
        }),
        close_code::UNAUTHORIZED => Some(WorkerError::Unauthorized(close.reason.clone())),
        _ => None,
    }
}

fn connect_failure(e: TransportError) -> Attempt {
    // Certificates and protocols do not fix themselves: stop with a clear reason.
    // The advice text is the client crate's, so worker and CLI say the same.
    if let Some(tls @ (rustls::Error::InvalidCertificate(_) | rustls::Error::InvalidMessage(_))) =
        e.tls_error()
    {
        return Attempt::Fatal(WorkerError::Tls(tunefleet_client::describe_tls_error(tls)));
    }
    if let TransportError::WebSocket(tungstenite::Error::Http(response)) = &e {
        let status = response.status();
        if status.as_u16() == 401 || status.as_u16() == 403 {
            return Attempt::Fatal(WorkerError::Unauthorized(format!(
                "HTTP {status} on the WebSocket upgrade"
            )));
        }
        return Attempt::Retry(format!("HTTP {status} on the WebSocket upgrade"));
    }
    Attempt::Retry(e.to_string())
}
