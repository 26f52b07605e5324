//! The dashboard's view-model: what the page knows about the fleet and the
//! connection, and how every message from the master changes it.
//!
//! Plain Rust, no browser types, so it runs (and is tested) natively. The
//! browser part (`app`) keeps a [`Session`] as the state of Yew's
//! `use_reducer`, hands it each [`Action`] (a socket event or a user's
//! request) through [`Session::apply`], runs the [`Effect`]s it returns and
//! renders the state.
//!
//! - [`Fleet`] is the state reducer for the pub/sub stream: a `snapshot`
//!   replaces everything (never merged, so a resync cannot duplicate rows),
//!   `event`s replace one job (by `job_id`) or worker (by `session`).
//! - [`Session`] is the client side of the protocol on one socket after
//!   another: `hello` with the token, `subscribe`, request ids and their
//!   replies, and what to do when the socket closes.

use std::collections::HashMap;

use tunefleet_shared::protocol::{
    close_code, ClientCommand, ClientRequest, ErrorCode, JobId, Role, SubmitReport,
    PROTOCOL_VERSION,
};

use crate::wire::Incoming;
use web_check::downloads::Download;

/// The state reducer for the pub/sub stream, shared with the native client
/// (`tunefleet watch`): one sequence rule, one way to apply a progress delta.
pub use tunefleet_shared::fleet::{job_order, EventOutcome, Fleet};

mod progress;
mod table;
pub use progress::{fleet_overall, overall, Overall};
pub use table::{visible_jobs, Sort, SortKey, StateFilter, TableAction, TableView, PAGE_ROWS};

/// The admin token of a sign-in link's fragment: `#token=T` (as `tunefleet
/// serve` prints it; other `&`-separated entries are ignored, `%XX` escapes
/// decoded). `None` when there is none, or it is empty or not UTF-8.
pub fn token_from_fragment(fragment: &str) -> Option<String> {
    let fragment = fragment.strip_prefix('#').unwrap_or(fragment);
    let raw = fragment
        .split('&')
        .find_map(|entry| entry.strip_prefix("token="))?;
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h)? * 16 + hex(l)?) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    let token = String::from_utf8(out).ok()?;
    let token = token.trim();
    (!token.is_empty()).then(|| token.to_string())
}

/// The connection as the page shows it.
#[derive(Clone, Debug, PartialEq)]
pub enum Link {
    /// Opening the socket / waiting for `welcome` (attempt 0 is the first).
    Connecting { attempt: u32 },
    /// Subscribed and (after the snapshot) live.
    Live { role: Role },
    /// The socket closed; the page retries after `delay_ms`.
    Retrying {
        attempt: u32,
        delay_ms: u64,
        reason: String,
    },
    /// The master refused the token (or wants one): waits for the user.
    NeedsToken { reason: String },
    /// The master speaks another protocol version: retrying cannot help.
    Incompatible { reason: String },
}

impl Link {
    pub fn is_live(&self) -> bool {
        matches!(self, Link::Live { .. })
    }

    pub fn role(&self) -> Option<Role> {
        match self {
            Link::Live { role } => Some(*role),
            _ => None,
        }
    }
}

/// Reconnect delay after `attempt` failed attempts in a row: 0.5 s doubling
/// to at most 10 s (the page adds up to 20 % jitter).
pub fn backoff_ms(attempt: u32) -> u64 {
    (500u64 << attempt.min(5)).min(10_000)
}

/// A request waiting for its reply.
#[derive(Clone, Debug, PartialEq)]
enum Pending {
    Hello,
    Subscribe,
    Submit,
    Cancel(JobId),
    Retry(JobId),
    /// `results`, asked for to make this download.
    Results(Download),
}

/// What the page must do after a message or a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Send this text frame.
    Send(String),
    /// The master's reply to `results` (its whole text), to make `download` from.
    Download { download: Download, reply: String },
    /// A cancel or retry went through, or not: a line for the notice area.
    Notice { text: String, error: bool },
    /// Keep this admin token for the tab (signed in), or forget it (signed
    /// out, or refused by the master: not worth trying on the next load).
    StoreToken(Option<String>),
}

/// The master's answer to the page's last submit, a workload file or a
/// model. State, not an [`Effect`]: the upload box shows it until the next
/// change, and takes its texts from it ([`Session::answer`]).
#[derive(Clone, Debug, PartialEq)]
pub enum SubmitAnswer {
    /// The master accepted a workload file.
    Accepted(SubmitReport),
    /// The master accepted a model run; its extract job is queued.
    ModelAccepted { name: String, extract_job: JobId },
    /// The master refused a workload file or a model (its message lists
    /// every problem), or the connection closed before it answered.
    Rejected(String),
}

/// Something that happens to the session: an event of the socket or a
/// request of the user. The page's reducer hands each to [`Session::apply`].
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Open a new socket ("Reconnect now", or the backoff after a close has
    /// passed): the page dials when [`Session::dial`] changes.
    Redial,
    /// The socket opened: `hello` goes out with the session's token.
    Opened,
    /// The frames received since the last batch, in order.
    Frames(Vec<String>),
    /// The socket closed, or never opened.
    Closed {
        code: u16,
        reason: String,
    },
    /// A submit, cancel or retry.
    Request(ClientCommand),
    /// The files of a download: the master's `results` first.
    Download(Download),
    /// Signed in with this token, or out: a session of its own on a new
    /// socket (the fleet is read again, with the new role).
    SignIn(String),
    SignOut,
}

/// What to do after the socket closed.
#[derive(Clone, Debug, PartialEq)]
pub enum CloseAction {
    Reconnect {
        delay_ms: u64,
    },
    /// Wait for the user (token needed, or incompatible master).
    Wait,
}

/// The protocol state of the page, across reconnects.
#[derive(Debug, Default)]
pub struct Session {
    pub fleet: Fleet,
    link: Option<Link>,
    next_id: u64,
    pending: HashMap<u64, Pending>,
    /// Failed connection attempts since the last `welcome`.
    failures: u32,
    /// The reason the master gave last (`shutdown`, an `error` before close).
    last_reason: Option<String>,
    /// A snapshot arrived on the current socket: the state on screen is current.
    fresh: bool,
    /// The answer to the last submit, numbered (1 for the first) so that the
    /// page can tell a new answer from one it has seen.
    answer: Option<(u64, SubmitAnswer)>,
    /// The admin token `hello` carries, if any.
    token: Option<String>,
    /// Bumped for each new socket the page is to open.
    dial: u64,
}

fn short_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

impl Session {
    pub fn new() -> Self {
        Self::default()
    }

    /// The session of a page that signs in with `token` (this tab's, or a
    /// sign-in link's), before its first socket.
    pub fn with_token(token: Option<String>) -> Self {
        Session {
            token,
            ..Session::default()
        }
    }

    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// Which socket the page is on: a new number asks for a new socket.
    pub fn dial(&self) -> u64 {
        self.dial
    }

    pub fn link(&self) -> Link {
        self.link.clone().unwrap_or(Link::Connecting { attempt: 0 })
    }

    pub fn role(&self) -> Option<Role> {
        self.link().role()
    }

    /// Live and synced: the state on screen is the master's current state.
    pub fn live(&self) -> bool {
        self.fresh && self.link().is_live()
    }

    /// The page is about to open a socket.
    pub fn connecting(&mut self) {
        self.fresh = false;
        self.link = Some(Link::Connecting {
            attempt: self.failures,
        });
        self.last_reason = None;
    }

    fn frame(&mut self, command: ClientCommand, pending: Pending) -> String {
        self.next_id += 1;
        let id = self.next_id;
        self.pending.insert(id, pending);
        serde_json::to_string(&ClientRequest { id, command }).unwrap_or_default()
    }

    /// The socket is open: the `hello` to send.
    pub fn opened(&mut self, token: Option<&str>) -> String {
        let token = token.map(str::trim).filter(|t| !t.is_empty());
        self.frame(
            ClientCommand::Hello {
                protocol: PROTOCOL_VERSION,
                token: token.map(str::to_owned),
                client: Some("tunefleet-web".into()),
            },
            Pending::Hello,
        )
    }

    /// A request from the user (submit, cancel, retry); `None` when the page
    /// is not connected (the buttons are disabled then anyway). Downloads
    /// have their own: [`Session::download`].
    pub fn request(&mut self, command: ClientCommand) -> Option<String> {
        if !self.link().is_live() {
            return None;
        }
        let pending = match &command {
            ClientCommand::Submit { .. } | ClientCommand::SubmitModel { .. } => Pending::Submit,
            ClientCommand::Cancel { job_id } => Pending::Cancel(job_id.clone()),
            ClientCommand::Retry { job_id } => Pending::Retry(job_id.clone()),
            ClientCommand::Subscribe { .. } => Pending::Subscribe,
            _ => return None,
        };
        Some(self.frame(command, pending))
    }

    /// Asks the master for every job's results, archived ones included as
    /// in the CLI's exports, to make `download` from; `None` when the page
    /// is not connected or a download is already on its way (one results
    /// reply at a time: each can be megabytes on this socket).
    pub fn download(&mut self, download: Download) -> Option<String> {
        if !self.link().is_live() || self.downloading() {
            return None;
        }
        let command = ClientCommand::Results {
            job_ids: None,
            archived: true,
        };
        Some(self.frame(command, Pending::Results(download)))
    }

    /// Whether a download waits for the master's results.
    pub fn downloading(&self) -> bool {
        self.pending
            .values()
            .any(|p| matches!(p, Pending::Results(_)))
    }

    /// Whether a submit is waiting for its reply.
    pub fn submitting(&self) -> bool {
        self.pending.values().any(|p| *p == Pending::Submit)
    }

    /// One text frame from the master.
    pub fn received(&mut self, text: &str) -> Vec<Effect> {
        // Not the derived `ServerMessage` reader: see `wire.rs` (module size).
        let Some(msg) = crate::wire::parse(text) else {
            // A newer master may send more; nothing we can do with it.
            return Vec::new();
        };
        let mut effects = Vec::new();
        match msg {
            Incoming::Welcome { id, role } => effects.extend(self.welcomed(id, role)),
            Incoming::Submitted { id, report } => {
                self.pending.remove(&id);
                self.answered(SubmitAnswer::Accepted(report))
            }
            Incoming::ModelSubmitted {
                id,
                name,
                extract_job,
            } => {
                self.pending.remove(&id);
                self.answered(SubmitAnswer::ModelAccepted { name, extract_job })
            }
            Incoming::Cancelled { id, job_id } => {
                self.pending.remove(&id);
                effects.push(Effect::Notice {
                    text: format!("cancelled {}", self.job_label(&job_id)),
                    error: false,
                })
            }
            Incoming::Retried { id, job_id } => {
                self.pending.remove(&id);
                effects.push(Effect::Notice {
                    text: format!("{} is queued again", self.job_label(&job_id)),
                    error: false,
                })
            }
            Incoming::Results { id } => {
                if let Some(Pending::Results(download)) = self.pending.remove(&id) {
                    effects.push(Effect::Download {
                        download,
                        reply: text.to_owned(),
                    });
                }
            }
            Incoming::OtherReply { id } => {
                self.pending.remove(&id);
            }
            Incoming::Error { id, code, message } => {
                effects.extend(self.refused(id, code, message))
            }
            Incoming::Snapshot { seq, snapshot } => {
                self.fleet.apply_snapshot(seq, snapshot);
                self.fresh = true;
            }
            Incoming::Event { seq, event } => {
                if matches!(self.fleet.apply_event(seq, event), EventOutcome::Gap { .. }) {
                    let frame = self.frame(
                        ClientCommand::Subscribe { deltas: true },
                        Pending::Subscribe,
                    );
                    effects.push(Effect::Send(frame));
                }
            }
            Incoming::Shutdown { reason } => {
                self.last_reason = Some(format!("master shutting down: {reason}"))
            }
        }
        effects
    }

    /// The answer to our `hello`: the link is live, and we subscribe (with
    /// deltas) at once.
    fn welcomed(&mut self, id: u64, role: Role) -> Option<Effect> {
        if self.pending.remove(&id) != Some(Pending::Hello) {
            return None;
        }
        self.failures = 0;
        self.link = Some(Link::Live { role });
        let frame = self.frame(
            ClientCommand::Subscribe { deltas: true },
            Pending::Subscribe,
        );
        Some(Effect::Send(frame))
    }

    /// An error from the master, handled by the request it answers: a
    /// refused `hello` changes the link (a token to ask for, a master too
    /// new), a refused submit is its answer, the rest become notices.
    fn refused(&mut self, id: Option<u64>, code: ErrorCode, message: String) -> Option<Effect> {
        let pending = id.and_then(|id| self.pending.remove(&id));
        match pending {
            Some(Pending::Hello) => {
                self.last_reason = Some(message.clone());
                if code == ErrorCode::Unauthorized {
                    self.link = Some(Link::NeedsToken { reason: message });
                } else if code == ErrorCode::ProtocolMismatch {
                    self.link = Some(Link::Incompatible { reason: message });
                }
                None
            }
            Some(Pending::Submit) => {
                self.answered(SubmitAnswer::Rejected(message));
                None
            }
            Some(Pending::Cancel(job)) | Some(Pending::Retry(job)) => Some(Effect::Notice {
                text: format!("{}: {message}", self.job_label(&job)),
                error: true,
            }),
            Some(Pending::Results(_)) => Some(Effect::Notice {
                text: format!("download failed: {message}"),
                error: true,
            }),
            _ => Some(Effect::Notice {
                text: message,
                error: true,
            }),
        }
    }

    /// The reducer's step: `action` applied, and what the page must do
    /// about it (frames to send, notices, a download to make, a token to
    /// forget). The answer to a submit is kept here instead ([`Session::answer`]).
    pub fn apply(&mut self, action: Action) -> Vec<Effect> {
        match action {
            Action::Redial => {
                self.redial();
                Vec::new()
            }
            Action::Opened => {
                let token = self.token.clone();
                vec![Effect::Send(self.opened(token.as_deref()))]
            }
            Action::Frames(frames) => frames.iter().flat_map(|f| self.received(f)).collect(),
            Action::Closed { code, reason } => {
                let (_, mut effects) = self.closed(code, &reason);
                if matches!(self.link, Some(Link::NeedsToken { .. })) && self.token.is_some() {
                    self.token = None;
                    effects.push(Effect::StoreToken(None));
                }
                effects
            }
            Action::Request(command) => self
                .request(command)
                .map(Effect::Send)
                .into_iter()
                .collect(),
            Action::Download(download) => self.start_download(download),
            Action::SignIn(token) => self.start_over(Some(token)),
            Action::SignOut => self.start_over(None),
        }
    }

    fn redial(&mut self) {
        self.dial += 1;
        self.connecting();
    }

    /// A new session with `token`, on a new socket.
    fn start_over(&mut self, token: Option<String>) -> Vec<Effect> {
        *self = Session {
            token: token.clone(),
            dial: self.dial,
            ..Session::default()
        };
        self.redial();
        vec![Effect::StoreToken(token)]
    }

    fn start_download(&mut self, download: Download) -> Vec<Effect> {
        match self.download(download) {
            Some(frame) => vec![Effect::Send(frame)],
            // The buttons are disabled meanwhile; a click already queued lands here.
            None if self.downloading() => Vec::new(),
            None => vec![Effect::Notice {
                text: "download failed: not connected to the master (the files are made from its results)"
                    .into(),
                error: true,
            }],
        }
    }

    /// The answer to the last submit and its number (1, 2, …: a new number
    /// is a new answer, even when it reads the same).
    pub fn answer(&self) -> Option<&(u64, SubmitAnswer)> {
        self.answer.as_ref()
    }

    fn answered(&mut self, answer: SubmitAnswer) {
        let n = self.answer.as_ref().map_or(0, |(n, _)| *n) + 1;
        self.answer = Some((n, answer));
    }

    /// After a close that the page retries: the attempt and the delay in
    /// ms before the next one (the page adds up to 20 % jitter).
    pub fn retry(&self) -> Option<(u32, u64)> {
        match &self.link {
            Some(Link::Retrying {
                attempt, delay_ms, ..
            }) => Some((*attempt, *delay_ms)),
            _ => None,
        }
    }

    fn job_label(&self, job_id: &str) -> String {
        match self.fleet.job(job_id) {
            Some(job) => format!("job {}", job.name),
            None => format!("job {}", short_id(job_id)),
        }
    }

    /// The socket closed (or failed to open). The fleet state stays on
    /// screen (marked stale by the link) until the next snapshot replaces it.
    pub fn closed(&mut self, code: u16, reason: &str) -> (CloseAction, Vec<Effect>) {
        self.fresh = false;
        let mut effects = Vec::new();
        for (_, pending) in std::mem::take(&mut self.pending) {
            match pending {
                Pending::Submit => self.answered(SubmitAnswer::Rejected(
                    "the connection closed before the master answered; check the jobs table \
                     before submitting again (a repeated file only creates duplicates' skips)"
                        .into(),
                )),
                Pending::Results(_) => effects.push(Effect::Notice {
                    text: "download failed: the connection closed before the master answered"
                        .into(),
                    error: true,
                }),
                _ => {}
            }
        }
        let reason = if !reason.is_empty() {
            reason.to_string()
        } else if let Some(r) = self.last_reason.take() {
            r
        } else {
            match code {
                1006 => "connection lost".into(),
                1001 => "master going away".into(),
                c => format!("closed ({c})"),
            }
        };
        match (code, self.link.take()) {
            (close_code::UNAUTHORIZED, _) | (_, Some(Link::NeedsToken { .. })) => {
                self.link = Some(Link::NeedsToken { reason });
                (CloseAction::Wait, effects)
            }
            (close_code::PROTOCOL_MISMATCH, _) | (_, Some(Link::Incompatible { .. })) => {
                self.link = Some(Link::Incompatible { reason });
                (CloseAction::Wait, effects)
            }
            _ => {
                let delay_ms = backoff_ms(self.failures);
                self.failures = self.failures.saturating_add(1);
                self.link = Some(Link::Retrying {
                    attempt: self.failures,
                    delay_ms,
                    reason,
                });
                (CloseAction::Reconnect { delay_ms }, effects)
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
