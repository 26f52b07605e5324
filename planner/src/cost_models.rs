//! The fleet's cost models: one trained model per effective target and TVM
//! release, which a model round starts from and sends back (issue 39,
//! part 4; the wire is `tunefleet_shared::model::cost_model`).
//!
//! Why per effective target: a model learns how schedules run on one kind of
//! machine, and a job that leaves `mcpu` open is tuned for the worker that
//! runs it, so the key is the job's target completed by the worker's (what
//! a result's `target` says). Why per TVM release (major.minor): the
//! features the model is trained on are TVM's, and may change between
//! releases; a fleet with two releases keeps a model for each instead of
//! each half replacing the other's.
//!
//! Which model to keep when rounds bring theirs back, several at once
//! (parallel rounds start from the same model and each adds its own
//! samples; the master cannot merge two models: it never reads them):
//! 1. none held: keep it;
//! 2. it was trained from the model held (`base` is its id and the round
//!    used it): keep it, it knows all the held one knew and more;
//! 3. it holds at least as many samples: keep it (a parallel round's, or a
//!    model at the driver's sample cap, where every model holds the same
//!    number and the newest wins);
//! 4. the round was sent the held model and could not use it (another
//!    format): keep it, else the fleet would hold a model none of its
//!    workers can read, forever;
//! 5. else (a parallel round started from an older model and knows less):
//!    drop it. Its samples are not lost to its task: its records train the
//!    task's next round.
//!
//! Sans-IO like the rest of the crate: the core feeds results and asks what
//! an assign carries; the store keeps the rows.

use std::collections::BTreeMap;

use tunefleet_shared::model::{CostModelShare, SharedCostModel};
use tunefleet_shared::protocol::Millis;
use tunefleet_shared::target::Target;

/// Which model: the effective target's canonical JSON and the TVM release
/// (`"0.27"`; empty when the worker did not say).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CostModelKey {
    pub target: String,
    pub tvm: String,
}

impl CostModelKey {
    /// The model a job on `job` run by a worker on `worker` with TVM
    /// `tvm_version` uses.
    pub fn of(job: &Target, worker: &Target, tvm_version: Option<&str>) -> CostModelKey {
        CostModelKey::effective(&job.completed_by(worker), tvm_version)
    }

    /// The key of an effective target (a result's `target`).
    pub fn effective(target: &Target, tvm_version: Option<&str>) -> CostModelKey {
        CostModelKey {
            target: target.canonical_json(),
            tvm: release(tvm_version.unwrap_or_default()),
        }
    }
}

/// `0.27.0.post1` → `0.27`.
fn release(version: &str) -> String {
    version.split('.').take(2).collect::<Vec<_>>().join(".")
}

/// A model the fleet holds.
#[derive(Clone, Debug, PartialEq)]
pub struct CostModel {
    /// A hash of its bytes (the core's): rounds name the model they started from.
    pub id: String,
    /// Samples it holds.
    pub samples: u32,
    /// The TVM that wrote it.
    pub tvm_version: Option<String>,
    /// Its bytes, base64, as an assign carries them.
    pub data_b64: String,
    /// When it was kept.
    pub updated_at: Millis,
}

impl CostModel {
    fn shared(&self) -> SharedCostModel {
        SharedCostModel {
            id: self.id.clone(),
            samples: self.samples,
            tvm_version: self.tvm_version.clone(),
            data_b64: self.data_b64.clone(),
        }
    }
}

/// A model a round's result brought, and what the round started from.
#[derive(Clone, Debug, PartialEq)]
pub struct Returned {
    pub model: CostModel,
    /// The id of the model the round was sent, if any.
    pub base: Option<String>,
    /// Whether the round started from it (false: it could not use it).
    pub used: bool,
}

/// What [`CostModels::offer`] did, and why (for the log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    First,
    Extends,
    AsLarge,
    HeldUnreadable,
    /// Dropped: a parallel round's, started from an older model.
    Older,
}

impl Verdict {
    pub fn kept(self) -> bool {
        self != Verdict::Older
    }
}

/// The models held, by key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CostModels {
    held: BTreeMap<CostModelKey, CostModel>,
}

impl CostModels {
    /// The models as stored.
    pub fn restore(rows: impl IntoIterator<Item = (CostModelKey, CostModel)>) -> CostModels {
        CostModels {
            held: rows.into_iter().collect(),
        }
    }

    /// Keeps `returned` for `key` or drops it (the module's rule).
    pub fn offer(&mut self, key: CostModelKey, returned: Returned) -> Verdict {
        let verdict = match self.held.get(&key) {
            None => Verdict::First,
            Some(held) if returned.base.as_deref() == Some(held.id.as_str()) => {
                if returned.used {
                    Verdict::Extends
                } else {
                    Verdict::HeldUnreadable
                }
            }
            Some(held) if returned.model.samples >= held.samples => Verdict::AsLarge,
            Some(_) => Verdict::Older,
        };
        if verdict.kept() {
            self.held.insert(key, returned.model);
        }
        verdict
    }

    pub fn get(&self, key: &CostModelKey) -> Option<&CostModel> {
        self.held.get(key)
    }

    /// What a round's assign carries: the model for `key`, if any.
    pub fn share(&self, key: &CostModelKey) -> CostModelShare {
        CostModelShare {
            model: self.held.get(key).map(CostModel::shared),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&CostModelKey, &CostModel)> {
        self.held.iter()
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests;
