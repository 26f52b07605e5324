//! The fleet's cost models on the core (issue 39, part 4; the rule is the
//! planner's `cost_models`). A model round's result brings the model the
//! round ended with; it is taken out of the result before the scheduler
//! sees it (a job's view goes to every subscriber and into its row), kept or
//! dropped by the planner's rule once the result is accepted, and written
//! by the batch's commit. A round's `assign` gets the model for its
//! effective target as it is collected, so it carries the newest one (not
//! the one of when the round was planned) and no job row holds a copy.

use sha2::{Digest, Sha256};
use tracing::{debug, info, warn};
use tunefleet_shared::model::base64;
use tunefleet_shared::model::cost_model::{
    MAX_COST_MODEL_BYTES, RESULT_BLOB_KEY, RESULT_SUMMARY_KEY,
};
use tunefleet_shared::protocol::{JobResult, MasterMessage, Millis};

use super::Core;
use crate::cost_models::{CostModel, CostModelKey, Returned};
use crate::scheduler::SessionId;

impl Core {
    /// `serve --no-cost-model-sharing`: rounds start from their task's
    /// records alone, as before the fleet kept cost models.
    pub fn set_cost_model_sharing(&mut self, on: bool) {
        self.share_cost_models = on;
    }

    /// Takes the returned model out of `result` (always: a blob never
    /// reaches a view), and says which key it is for when it is a model
    /// round's and sharing is on.
    pub(super) fn take_cost_model(
        &self,
        job_id: &str,
        result: &mut JobResult,
        now: Millis,
    ) -> Option<(CostModelKey, Returned)> {
        let text = result.extra.as_object_mut()?.remove(RESULT_BLOB_KEY)?;
        let job = self.scheduler.job(job_id)?;
        if !self.share_cost_models || !job.extras.model_round {
            return None;
        }
        let bytes = match text.as_str().map(base64::decode) {
            Some(Ok(bytes)) if bytes.len() <= MAX_COST_MODEL_BYTES => bytes,
            Some(Ok(bytes)) => {
                warn!(job = %job_id, bytes = bytes.len(), "a returned cost model is larger than the fleet keeps; dropped");
                return None;
            }
            _ => {
                warn!(job = %job_id, "a returned cost model is not base64; dropped");
                return None;
            }
        };
        let summary = &result.extra[RESULT_SUMMARY_KEY];
        let target = result
            .target
            .clone()
            .unwrap_or_else(|| job.view.workload.target.clone());
        let key = CostModelKey::effective(&target, result.tvm_version.as_deref());
        let model = CostModel {
            id: hex::encode(&Sha256::digest(&bytes)[..8]),
            samples: summary["samples"]
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            tvm_version: result.tvm_version.clone(),
            data_b64: base64::encode(&bytes),
            updated_at: now,
        };
        let returned = Returned {
            model,
            base: summary["base"].as_str().map(str::to_string),
            used: summary["used"].as_bool().unwrap_or(false),
        };
        Some((key, returned))
    }

    /// After the round's result was accepted: the planner's rule keeps the
    /// model or drops it; a kept one is written with the batch.
    pub(super) fn offer_cost_model(&mut self, job_id: &str, key: CostModelKey, returned: Returned) {
        let (id, samples) = (returned.model.id.clone(), returned.model.samples);
        let verdict = self.cost_models.offer(key.clone(), returned);
        if !verdict.kept() {
            debug!(job = %job_id, %id, samples, "a parallel round's cost model knows less than the fleet's; dropped");
            return;
        }
        info!(job = %job_id, %id, samples, target = %key.target, tvm = %key.tvm, ?verdict, "the fleet's cost model");
        if let Some(model) = self.cost_models.get(&key) {
            self.store.put_cost_model(&key, model);
        }
    }

    /// Gives a model round's `assign` the fleet's model for its effective
    /// target (the job's target completed by the worker's, and its TVM).
    pub(super) fn share_cost_model(&self, session: SessionId, msg: &mut MasterMessage) {
        let MasterMessage::Assign {
            workload,
            model_round: true,
            cost_model,
            ..
        } = msg
        else {
            return;
        };
        if !self.share_cost_models {
            return;
        }
        let Some(worker) = self.scheduler.worker(session) else {
            return;
        };
        let key = CostModelKey::of(
            &workload.target,
            &worker.target,
            worker.tvm_version.as_deref(),
        );
        *cost_model = Some(Box::new(self.cost_models.share(&key)));
    }
}
