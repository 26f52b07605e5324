//! How the page reads the master's frames: the messages it acts on.
//!
//! Why not `serde_json::from_str::<ServerMessage>`: serde_json's reader and
//! serde's derived decoders cost ~30% of the page's module
//! (docs/benchmarks.md, "Web dashboard"). Here the frame is parsed once into
//! a JSON tree ([`tunefleet_shared::tree`]) and decoded by the shared types'
//! `FromTree` derives, which follow the same serde attributes. A reply the
//! page does not act on is not decoded at all. The wire is the protocol's,
//! unchanged; the tests check this reader against the derived one on every
//! message kind.

use tunefleet_shared::protocol::{ErrorCode, FleetEvent, FleetSnapshot, JobId, Role, SubmitReport};
use tunefleet_shared::tree::{self, FromTree, Value};

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
    /// The reply to `results`, left undecoded: its text goes to the checker
    /// module, which makes the download files from it.
    Results {
        id: u64,
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

#[derive(FromTree)]
struct Welcome {
    role: Role,
}

#[derive(FromTree)]
struct JobIdOnly {
    job_id: JobId,
}

#[derive(FromTree)]
struct ModelSubmitted {
    name: String,
    extract_job: JobId,
}

#[derive(FromTree)]
struct ErrorMessage {
    id: Option<u64>,
    code: ErrorCode,
    message: String,
}

#[derive(FromTree)]
struct SnapshotMessage {
    seq: u64,
    snapshot: FleetSnapshot,
}

#[derive(FromTree)]
struct Shutdown {
    reason: String,
}

#[derive(FromTree)]
struct EventMessage {
    seq: u64,
    event: FleetEvent,
}

fn read<T: FromTree>(value: &Value<'_>) -> Option<T> {
    T::from_tree(value).ok()
}

/// Reads a frame; `None` for what is not JSON or not a message this page
/// knows (a newer master may send more).
pub fn parse(text: &str) -> Option<Incoming> {
    let frame = tree::parse(text).ok()?;
    match frame.get("type")?.as_str()? {
        "reply" => reply(&frame),
        "error" => read::<ErrorMessage>(&frame).map(|e| Incoming::Error {
            id: e.id,
            code: e.code,
            message: e.message,
        }),
        "snapshot" => read::<SnapshotMessage>(&frame).map(|s| Incoming::Snapshot {
            seq: s.seq,
            snapshot: s.snapshot,
        }),
        "event" => read::<EventMessage>(&frame).map(|e| Incoming::Event {
            seq: e.seq,
            event: e.event,
        }),
        "shutdown" => read::<Shutdown>(&frame).map(|s| Incoming::Shutdown { reason: s.reason }),
        _ => None,
    }
}

fn reply(frame: &Value<'_>) -> Option<Incoming> {
    let id = frame.get("id")?.as_u64()?;
    let body = frame.get("body")?;
    Some(match body.get("kind")?.as_str()? {
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
        "results" => Incoming::Results { id },
        _ => Incoming::OtherReply { id },
    })
}

#[cfg(test)]
mod tests;
