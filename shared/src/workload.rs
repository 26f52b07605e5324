//! Workload format (placeholder types; the YAML parser and validation are being written).

use crate::target::Target;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatmulShape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", content = "shape", rename_all = "snake_case")]
pub enum Op {
    Matmul(MatmulShape),
    Tvmscript(String),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    pub name: String,
    #[serde(flatten)]
    pub op: Op,
    pub dtype: String,
    pub target: Target,
    pub trials: u32,
}

impl Workload {
    pub fn job_id(&self) -> String {
        let mut canon = serde_json::to_value(self).unwrap_or_default();
        if let Some(obj) = canon.as_object_mut() {
            obj.remove("name");
        }
        let digest = Sha256::digest(canon.to_string().as_bytes());
        hex::encode(&digest[..8])
    }
    pub fn flops(&self) -> Option<f64> {
        match &self.op {
            Op::Matmul(s) => Some(2.0 * s.m as f64 * s.n as f64 * s.k as f64),
            Op::Tvmscript(_) => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WorkloadError(pub String);

pub fn parse_workload_file(text: &str, filename: &str) -> Result<Vec<Workload>, WorkloadError> {
    let _ = (text, filename);
    Err(WorkloadError("not yet".into()))
}
