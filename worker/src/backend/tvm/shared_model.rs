//! The fleet's cost model through this worker (issue 39, part 4): the
//! `assign`'s model written into the job's work directory for the driver
//! (`cost_model_share` in `JOB.json`), and the model the driver ends the
//! round with read back into the result (`extra.cost_model_b64`), both as
//! files, so the job file and the driver's result line stay small.
//!
//! A model this worker cannot write or read back is a warning, never a
//! failed round: the records matter more than the cost model.

use std::path::Path;

use tunefleet_shared::model::cost_model::{
    MAX_COST_MODEL_BYTES, RESULT_BLOB_KEY, RESULT_SUMMARY_KEY,
};
use tunefleet_shared::model::{base64, CostModelShare};

use super::DriverResult;

/// The fleet's model, as the driver reads it.
const SHARED_FILE: &str = "fleet_cost_model.npz";

/// `JOB.json`'s `cost_model_share` for the assign's `cost_model`: `{}`
/// (no model yet: start afresh, send yours) or `{"path", "id", "samples"}`.
pub(super) fn job_field(work: &Path, share: Option<&CostModelShare>) -> serde_json::Value {
    let Some(share) = share else {
        return serde_json::Value::Null;
    };
    let Some(model) = &share.model else {
        return serde_json::json!({});
    };
    let written = base64::decode(&model.data_b64)
        .map_err(|e| format!("not base64: {e}"))
        .and_then(|bytes| {
            let path = work.join(SHARED_FILE);
            std::fs::write(&path, bytes)
                .map(|()| path)
                .map_err(|e| e.to_string())
        });
    match written {
        Ok(path) => serde_json::json!({
            "path": path,
            "id": model.id,
            "samples": model.samples,
        }),
        Err(e) => {
            tracing::warn!(id = %model.id, "the fleet's cost model is not used: {e}");
            serde_json::json!({})
        }
    }
}

/// The driver's `cost_model` summary for the result's `extra`, with the
/// model it wrote (`path`) read into `cost_model_b64`. Read before the work
/// directory goes.
pub(super) fn take_returned(driver: &mut DriverResult) -> Vec<(&'static str, serde_json::Value)> {
    let Some(mut summary) = driver.cost_model.take().filter(|s| s.is_object()) else {
        return Vec::new();
    };
    let path = summary
        .as_object_mut()
        .and_then(|s| s.remove("path"))
        .and_then(|p| p.as_str().map(std::path::PathBuf::from));
    let mut extra = Vec::new();
    if let Some(path) = path {
        match read_bounded(&path) {
            Ok(bytes) => extra.push((RESULT_BLOB_KEY, base64::encode(&bytes).into())),
            Err(e) => {
                tracing::warn!(path = %path.display(), "the round's cost model is not sent: {e}")
            }
        }
    }
    extra.push((RESULT_SUMMARY_KEY, summary));
    extra
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, String> {
    let len = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    if len > MAX_COST_MODEL_BYTES as u64 {
        return Err(format!(
            "{len} bytes, more than the fleet keeps ({MAX_COST_MODEL_BYTES})"
        ));
    }
    std::fs::read(path).map_err(|e| e.to_string())
}
