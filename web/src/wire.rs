//! How the page reads the master's frames: the messages it acts on, read
//! without serde's internally tagged path.
//!
//! Why not `serde_json::from_str::<ServerMessage>`: for a `#[serde(tag)]`
//! enum serde first buffers the whole message into its private `Content`
//! tree, then decodes the variant from that tree, so every type a message
//! carries (job views, workers, model runs, snapshots) is compiled a second
//! time against the buffer. In the page's module that was ~200 KB of the
//! ~960 KB (docs/benchmarks.md, "Web dashboard"). Here the frame is parsed
//! once into the page's JSON tree ([`crate::json`]), the tag is looked up in
//! it, and the variant's own struct is decoded from the tree: each type
//! compiled once, against a decoder that is only a dispatch on parsed
//! nodes. The wire is the protocol's, unchanged; the tests check this
//! reader against the derived one on every message kind.

use serde::Deserialize;
use tunefleet_shared::model::ModelView;
use tunefleet_shared::protocol::{
    ErrorCode, FleetEvent, FleetSnapshot, JobCounts, JobId, JobProgress, JobView, Role,
    SubmitReport, WorkerView,
};

use crate::json::{self, Value};

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

fn read<'a, T: Deserialize<'a>>(value: Value<'a>) -> Option<T> {
    json::from_value(value).ok()
}

/// A message's tag (`type`, or a reply's or event's `kind`), owned so that
/// the message can be moved into its decoder.
fn tag(value: &Value<'_>, key: &str) -> Option<String> {
    value.get(key)?.as_str().map(str::to_owned)
}

/// Reads a frame; `None` for what is not JSON or not a message this page
/// knows (a newer master may send more).
pub fn parse(text: &str) -> Option<Incoming> {
    let frame = json::parse(text).ok()?;
    match tag(&frame, "type")?.as_str() {
        "reply" => reply(frame),
        "error" => read::<ErrorMessage>(frame).map(|e| Incoming::Error {
            id: e.id,
            code: e.code,
            message: e.message,
        }),
        "snapshot" => read::<SnapshotMessage>(frame).map(|s| Incoming::Snapshot {
            seq: s.seq,
            snapshot: s.snapshot,
        }),
        "event" => event(frame),
        "shutdown" => read::<Shutdown>(frame).map(|s| Incoming::Shutdown { reason: s.reason }),
        _ => None,
    }
}

fn reply(mut frame: Value<'_>) -> Option<Incoming> {
    let id = frame.get("id")?.as_u64()?;
    let body = frame.take("body")?;
    Some(match tag(&body, "kind")?.as_str() {
        "welcome" => Incoming::Welcome {
            id,
            role: read::<Welcome>(body)?.role,
        },
        "submitted" => Incoming::Submitted {
            id,
            report: read::<SubmitReport>(body)?,
        },
        "model_submitted" => {
            let body = read::<ModelSubmitted>(body)?;
            Incoming::ModelSubmitted {
                id,
                name: body.name,
                extract_job: body.extract_job,
            }
        }
        "cancelled" => Incoming::Cancelled {
            id,
            job_id: read::<JobIdOnly>(body)?.job_id,
        },
        "retried" => Incoming::Retried {
            id,
            job_id: read::<JobIdOnly>(body)?.job_id,
        },
        _ => Incoming::OtherReply { id },
    })
}

fn event(mut frame: Value<'_>) -> Option<Incoming> {
    let seq = frame.get("seq")?.as_u64()?;
    let body = frame.take("event")?;
    let event = match tag(&body, "kind")?.as_str() {
        "job_updated" => FleetEvent::JobUpdated {
            job: read::<JobUpdated>(body)?.job,
        },
        "job_progress" => FleetEvent::JobProgress {
            progress: read::<Progress>(body)?.progress,
        },
        "worker_joined" => FleetEvent::WorkerJoined {
            worker: read::<Worker>(body)?.worker,
        },
        "worker_updated" => FleetEvent::WorkerUpdated {
            worker: read::<Worker>(body)?.worker,
        },
        "worker_left" => {
            let left = read::<WorkerLeft>(body)?;
            FleetEvent::WorkerLeft {
                session: left.session,
                reason: left.reason,
            }
        }
        "model_updated" => FleetEvent::ModelUpdated {
            model: read::<ModelUpdated>(body)?.model,
        },
        "jobs_archived" => {
            let archived = read::<JobsArchived>(body)?;
            FleetEvent::JobsArchived {
                job_ids: archived.job_ids,
                archived: archived.archived,
            }
        }
        _ => return None,
    };
    Some(Incoming::Event { seq, event })
}

#[cfg(test)]
mod tests;
