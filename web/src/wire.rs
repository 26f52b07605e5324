//! How the page reads the master's frames: the messages it acts on, read
//! without serde's internally tagged path.
//!
//! Why not `serde_json::from_str::<ServerMessage>`: for a `#[serde(tag)]`
//! enum serde first buffers the whole message into its private `Content`
//! tree, then decodes the variant from that tree, so every type a message
//! carries (job views, workers, model runs, snapshots) is compiled a second
//! time against the buffer. In the page's module that was ~200 KB of the
//! ~960 KB (docs/benchmarks.md, "Dashboard size"). Here the tag is read
//! first by a struct that skips everything else, then the message is read
//! again straight into the variant's own struct: two passes over a frame of
//! a few hundred bytes (a snapshot's second pass is the only large one), and
//! each type compiled once. The wire is the protocol's, unchanged; the tests
//! check this reader against the derived one on every message kind.

use std::borrow::Cow;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use tunefleet_shared::model::ModelView;
use tunefleet_shared::protocol::{
    ErrorCode, FleetEvent, FleetSnapshot, JobCounts, JobId, JobProgress, JobView, Role,
    SubmitReport, WorkerView,
};

/// A frame from the master, as far as the page uses it.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    Welcome {
        id: u64,
        role: Role,
    },
    Submitted {
        id: u64,
        report: SubmitReport,
    },
    ModelSubmitted {
        id: u64,
        name: String,
        extract_job: JobId,
    },
    Cancelled {
        id: u64,
        job_id: JobId,
    },
    Retried {
        id: u64,
        job_id: JobId,
    },
    /// A reply the page has nothing to do with beyond its id.
    OtherReply {
        id: u64,
    },
    Error {
        id: Option<u64>,
        code: ErrorCode,
        message: String,
    },
    Snapshot {
        seq: u64,
        snapshot: FleetSnapshot,
    },
    Event {
        seq: u64,
        event: FleetEvent,
    },
    Shutdown {
        reason: String,
    },
}

#[derive(Deserialize)]
struct Tag<'a> {
    #[serde(rename = "type", borrow)]
    tag: Cow<'a, str>,
}

#[derive(Deserialize)]
struct Kind<'a> {
    #[serde(borrow)]
    kind: Cow<'a, str>,
}

#[derive(Deserialize)]
struct ReplyHead<'a> {
    id: u64,
    #[serde(borrow)]
    body: Kind<'a>,
}

#[derive(Deserialize)]
struct EventHead<'a> {
    seq: u64,
    #[serde(borrow)]
    event: Kind<'a>,
}

#[derive(Deserialize)]
struct Body<T> {
    body: T,
}

#[derive(Deserialize)]
struct Event<T> {
    event: T,
}

#[derive(Deserialize)]
struct Welcome {
    role: Role,
}

#[derive(Deserialize)]
struct JobIdOnly {
    job_id: JobId,
}

#[derive(Deserialize)]
struct ModelSubmitted {
    name: String,
    extract_job: JobId,
}

#[derive(Deserialize)]
struct ErrorMessage {
    #[serde(default)]
    id: Option<u64>,
    code: ErrorCode,
    message: String,
}

#[derive(Deserialize)]
struct SnapshotMessage {
    seq: u64,
    snapshot: FleetSnapshot,
}

#[derive(Deserialize)]
struct Shutdown {
    reason: String,
}

#[derive(Deserialize)]
struct JobUpdated {
    job: Box<JobView>,
}

#[derive(Deserialize)]
struct Progress {
    progress: JobProgress,
}

#[derive(Deserialize)]
struct Worker {
    worker: Box<WorkerView>,
}

#[derive(Deserialize)]
struct WorkerLeft {
    session: String,
    reason: String,
}

#[derive(Deserialize)]
struct ModelUpdated {
    model: Box<ModelView>,
}

#[derive(Deserialize)]
struct JobsArchived {
    job_ids: Vec<JobId>,
    archived: JobCounts,
}

fn read<T: DeserializeOwned>(text: &str) -> Option<T> {
    serde_json::from_str(text).ok()
}

/// Reads a frame; `None` for what is not JSON or not a message this page
/// knows (a newer master may send more).
pub fn parse(text: &str) -> Option<Incoming> {
    let tag: Tag<'_> = serde_json::from_str(text).ok()?;
    match tag.tag.as_ref() {
        "reply" => reply(text),
        "error" => read::<ErrorMessage>(text).map(|e| Incoming::Error {
            id: e.id,
            code: e.code,
            message: e.message,
        }),
        "snapshot" => read::<SnapshotMessage>(text).map(|s| Incoming::Snapshot {
            seq: s.seq,
            snapshot: s.snapshot,
        }),
        "event" => event(text),
        "shutdown" => read::<Shutdown>(text).map(|s| Incoming::Shutdown { reason: s.reason }),
        _ => None,
    }
}

fn reply(text: &str) -> Option<Incoming> {
    let head: ReplyHead<'_> = serde_json::from_str(text).ok()?;
    let id = head.id;
    Some(match head.body.kind.as_ref() {
        "welcome" => Incoming::Welcome {
            id,
            role: read::<Body<Welcome>>(text)?.body.role,
        },
        "submitted" => Incoming::Submitted {
            id,
            report: read::<Body<SubmitReport>>(text)?.body,
        },
        "model_submitted" => {
            let body = read::<Body<ModelSubmitted>>(text)?.body;
            Incoming::ModelSubmitted {
                id,
                name: body.name,
                extract_job: body.extract_job,
            }
        }
        "cancelled" => Incoming::Cancelled {
            id,
            job_id: read::<Body<JobIdOnly>>(text)?.body.job_id,
        },
        "retried" => Incoming::Retried {
            id,
            job_id: read::<Body<JobIdOnly>>(text)?.body.job_id,
        },
        _ => Incoming::OtherReply { id },
    })
}

fn event(text: &str) -> Option<Incoming> {
    let head: EventHead<'_> = serde_json::from_str(text).ok()?;
    let event = match head.event.kind.as_ref() {
        "job_updated" => FleetEvent::JobUpdated {
            job: read::<Event<JobUpdated>>(text)?.event.job,
        },
        "job_progress" => FleetEvent::JobProgress {
            progress: read::<Event<Progress>>(text)?.event.progress,
        },
        "worker_joined" => FleetEvent::WorkerJoined {
            worker: read::<Event<Worker>>(text)?.event.worker,
        },
        "worker_updated" => FleetEvent::WorkerUpdated {
            worker: read::<Event<Worker>>(text)?.event.worker,
        },
        "worker_left" => {
            let left = read::<Event<WorkerLeft>>(text)?.event;
            FleetEvent::WorkerLeft {
                session: left.session,
                reason: left.reason,
            }
        }
        "model_updated" => FleetEvent::ModelUpdated {
            model: read::<Event<ModelUpdated>>(text)?.event.model,
        },
        "jobs_archived" => {
            let archived = read::<Event<JobsArchived>>(text)?.event;
            FleetEvent::JobsArchived {
                job_ids: archived.job_ids,
                archived: archived.archived,
            }
        }
        _ => return None,
    };
    Some(Incoming::Event {
        seq: head.seq,
        event,
    })
}

#[cfg(test)]
mod tests;
