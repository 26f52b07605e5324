//! The fleet's cost model on the wire (issue 39, part 4).
//!
//! Every round of a model's task is a MetaSchedule session of its own, and
//! MetaSchedule's XGB cost model starts each session empty. So the master
//! keeps one trained model per *effective* target (the job's target
//! completed by the worker's, as a result's `target` says), sends it with
//! each model round's `assign` ([`CostModelShare`]), and keeps the one a
//! round sends back in its result: `extra.cost_model` (what the round
//! started from: `used`, `base`, `samples`) and `extra.cost_model_b64` (the
//! model's bytes, which the master takes out of the result before the job's
//! view is stored or published). The bytes are the driver's own format
//! (`python/tunefleet/_driver/cost_model.py`); the master never reads them.
//!
//! Compatibility: a master that does not share cost models sends no
//! `cost_model`, and a worker that does not know the field ignores it and
//! returns no model, so older workers and masters keep working.

use serde::{Deserialize, Serialize};

/// The largest cost model a master keeps or sends (its bytes, before
/// base64); the driver writes none larger.
pub const MAX_COST_MODEL_BYTES: usize = 4 * 1024 * 1024;

/// The key of a result's `extra` holding the returned model, base64.
pub const RESULT_BLOB_KEY: &str = "cost_model_b64";

/// The key of a result's `extra` saying what the round's cost model
/// started from: `{"used", "base", "samples", "ignored", ...}`.
pub const RESULT_SUMMARY_KEY: &str = "cost_model";

/// A model round's share of the fleet's cost model (the `assign`'s
/// `cost_model`). Present: start the round's cost model from `model` (when
/// the fleet has one for the effective target) and send back the model the
/// round ends with.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CostModelShare {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<SharedCostModel>,
}

/// A trained cost model as the fleet keeps it for one effective target.
/// `Debug` shows the size of `data_b64`, not its text.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SharedCostModel {
    /// The master's name for it (a hash of its bytes): a round's result
    /// names the model it started from (`base`).
    pub id: String,
    /// Samples it holds (its training set).
    pub samples: u32,
    /// The TVM release that wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tvm_version: Option<String>,
    /// Its bytes, base64.
    pub data_b64: String,
}

impl std::fmt::Debug for SharedCostModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCostModel")
            .field("id", &self.id)
            .field("samples", &self.samples)
            .field("tvm_version", &self.tvm_version)
            .field("data_b64", &format_args!("{} chars", self.data_b64.len()))
            .finish()
    }
}
