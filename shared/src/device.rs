//! The hardware a worker slot tunes on, as the master and its subscribers
//! show it: a GPU (`NVIDIA H200, 140 GiB`) or the host's CPU.
//!
//! Why on the wire and not only in the target: a target says what code is
//! built for (`{"kind":"cuda","arch":"sm_90"}`), not which card measures
//! it, and a rack mixes cards of one architecture with different memory
//! and clocks. The worker reports it once, in `register` (absent from
//! workers of earlier releases), and the master copies it into the
//! worker's view: `tunefleet status`, the dashboard's workers card.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Device {
    /// `gpu` or `cpu`.
    pub kind: String,
    /// As the hardware names itself: `NVIDIA H200`, `AMD EPYC 9B14`.
    pub name: String,
    /// The device's memory (a GPU's own; the host's for a CPU), in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// A GPU's index as `nvidia-smi` numbers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// A GPU's UUID (`GPU-…`), stable across reboots and renumbering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

impl Device {
    pub fn is_gpu(&self) -> bool {
        self.kind == "gpu"
    }
}

/// `NVIDIA H200 #0, 140 GiB` / `AMD EPYC 9B14, 23 GiB`.
impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if let Some(index) = self.index {
            write!(f, " #{index}")?;
        }
        if let Some(mib) = self.memory_mib {
            write!(f, ", {}", memory_text(mib))?;
        }
        Ok(())
    }
}

/// `140 GiB` from MiB (whole GiB from 10 GiB up, one decimal below).
pub fn memory_text(mib: u64) -> String {
    let gib = mib as f64 / 1024.0;
    if gib >= 10.0 {
        format!("{gib:.0} GiB")
    } else {
        format!("{gib:.1} GiB")
    }
}

#[cfg(test)]
mod tests;
