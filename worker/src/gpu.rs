//! NVIDIA GPUs on this host: found with `nvidia-smi`, chosen with `--gpus`
//! and `CUDA_VISIBLE_DEVICES`, each described as the CUDA target it serves.
//!
//! Why `nvidia-smi` and not NVML through a binding: it ships with every
//! driver, needs no library at build time, and its CSV query is a stable,
//! documented interface, so detection is a pure function of its output
//! ([`parse_query`]) and is tested from recorded output. A host without
//! `nvidia-smi` has no usable NVIDIA GPU; one whose `nvidia-smi` fails
//! (no driver loaded) is treated the same, with a warning.
//!
//! The target pins what a kernel depends on, with TVM's attribute names
//! (those `tvm.target.Target` accepts for `cuda`, and that TVM's own device
//! detection fills): `arch` from the compute capability (`sm_90`), and the
//! limits MetaSchedule's `VerifyGPUCode` checks candidates against. The
//! limits `nvidia-smi` cannot report are the same on every architecture
//! CUDA 13 supports (sm_75 and later): 1024 threads and 48 KiB of static
//! shared memory per block, warps of 32 (TVM's tags for the A100 and H100
//! say the same).

use std::time::Duration;

use tunefleet_shared::device::Device;
use tunefleet_shared::target::Target;

/// The fields asked of `nvidia-smi`, in the order [`parse_query`] reads.
pub const QUERY_FIELDS: &str = "index,uuid,name,memory.total,compute_cap,driver_version";

/// How long `nvidia-smi` may take (a wedged driver can hang it).
const SMI_TIMEOUT: Duration = Duration::from_secs(20);

/// One GPU, as `nvidia-smi` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// `nvidia-smi`'s index (PCI bus order).
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub memory_mib: Option<u64>,
    /// Compute capability (9, 0) for an H100 or H200.
    pub compute_cap: (u32, u32),
    pub driver_version: Option<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GpuError {
    #[error("nvidia-smi line {line}: {reason} (in `{text}`)")]
    Parse {
        line: usize,
        text: String,
        reason: String,
    },
    #[error("--gpus {0}: expected `all`, `none` or GPU indices such as `0,2`")]
    BadSelection(String),
    #[error("--gpus: GPU {index} is not on this host (nvidia-smi lists {listed})")]
    NotPresent { index: u32, listed: String },
    #[error("--gpus: GPU {index} is not visible to this worker (CUDA_VISIBLE_DEVICES={visible})")]
    NotVisible { index: u32, visible: String },
    #[error("nvidia-smi failed: {0}")]
    Smi(String),
}

impl Gpu {
    /// `sm_90` for compute capability 9.0.
    pub fn arch(&self) -> String {
        format!("sm_{}{}", self.compute_cap.0, self.compute_cap.1)
    }

    /// The CUDA target this GPU serves (see the module docs).
    pub fn target(&self) -> Target {
        let text = serde_json::json!({
            "kind": "cuda",
            "arch": self.arch(),
            "max_threads_per_block": 1024,
            "max_shared_memory_per_block": 49152,
            "thread_warp_size": 32,
        });
        Target::parse(&text.to_string()).unwrap_or_else(|_| Target::of_kind("cuda"))
    }

    /// What the master shows for this GPU.
    pub fn device(&self) -> Device {
        Device {
            kind: "gpu".into(),
            name: self.name.clone(),
            memory_mib: self.memory_mib,
            index: Some(self.index),
            uuid: Some(self.uuid.clone()),
        }
    }
}

/// The GPUs in `nvidia-smi --query-gpu=QUERY_FIELDS --format=csv,noheader,nounits`
/// output. Names may hold commas, so the fields are taken from both ends.
pub fn parse_query(text: &str) -> Result<Vec<Gpu>, GpuError> {
    let mut gpus = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let fail = |reason: &str| GpuError::Parse {
            line: n + 1,
            text: line.to_string(),
            reason: reason.to_string(),
        };
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() < 6 {
            return Err(fail("expected 6 comma-separated fields"));
        }
        let tail = &fields[fields.len() - 3..];
        let index = fields[0]
            .parse()
            .map_err(|_| fail("the index is not a number"))?;
        gpus.push(Gpu {
            index,
            uuid: fields[1].to_string(),
            name: fields[2..fields.len() - 3].join(", "),
            memory_mib: tail[0].parse().ok(),
            compute_cap: parse_compute_cap(tail[1]).ok_or_else(|| {
                fail("no compute capability (a driver older than 510 cannot say it: pass --target with `arch`)")
            })?,
            driver_version: Some(tail[2].to_string()).filter(|v| !v.starts_with('[')),
        });
    }
    Ok(gpus)
}

fn parse_compute_cap(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// `--gpus`: which of the host's GPUs this worker serves.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum GpuSelection {
    /// Every GPU visible to the worker (the default).
    #[default]
    All,
    /// No GPU: a CPU worker even on a GPU host.
    None,
    /// These `nvidia-smi` indices.
    Indices(Vec<u32>),
}

impl GpuSelection {
    pub fn parse(text: &str) -> Result<GpuSelection, GpuError> {
        match text.trim() {
            "all" => Ok(GpuSelection::All),
            "none" | "" => Ok(GpuSelection::None),
            list => {
                let mut indices = Vec::new();
                for part in list.split(',') {
                    let index = part
                        .trim()
                        .parse()
                        .map_err(|_| GpuError::BadSelection(text.to_string()))?;
                    if !indices.contains(&index) {
                        indices.push(index);
                    }
                }
                Ok(GpuSelection::Indices(indices))
            }
        }
    }
}

/// The GPUs a process with `CUDA_VISIBLE_DEVICES = visible` may use: all
/// when unset; none for an empty value or `-1`; else those it names, by
/// index or by UUID (or a unique prefix of one, as CUDA accepts), in its
/// order. CUDA stops at the first entry it cannot resolve, and so do we.
pub fn visible(gpus: &[Gpu], visible: Option<&str>) -> Vec<Gpu> {
    let Some(list) = visible else {
        return gpus.to_vec();
    };
    let mut out: Vec<Gpu> = Vec::new();
    for entry in list.split(',').map(str::trim) {
        let found = match entry.parse::<i64>() {
            Ok(i) => gpus.iter().find(|g| i64::from(g.index) == i),
            Err(_) => {
                let matching: Vec<&Gpu> = gpus
                    .iter()
                    .filter(|g| !entry.is_empty() && g.uuid.starts_with(entry))
                    .collect();
                (matching.len() == 1).then(|| matching[0])
            }
        };
        match found {
            Some(gpu) if !out.contains(gpu) => out.push(gpu.clone()),
            _ => break,
        }
    }
    out
}

/// The GPUs `selection` picks among those `visible_devices` lets this
/// worker use. Asking for one that is absent or hidden is an error: a
/// worker that silently served fewer GPUs would look healthy.
pub fn select(
    gpus: &[Gpu],
    selection: &GpuSelection,
    visible_devices: Option<&str>,
) -> Result<Vec<Gpu>, GpuError> {
    let usable = visible(gpus, visible_devices);
    match selection {
        GpuSelection::None => Ok(Vec::new()),
        GpuSelection::All => Ok(usable),
        GpuSelection::Indices(indices) => indices
            .iter()
            .map(|&index| {
                if let Some(gpu) = usable.iter().find(|g| g.index == index) {
                    return Ok(gpu.clone());
                }
                if gpus.iter().any(|g| g.index == index) {
                    return Err(GpuError::NotVisible {
                        index,
                        visible: visible_devices.unwrap_or_default().to_string(),
                    });
                }
                Err(GpuError::NotPresent {
                    index,
                    listed: listed(gpus),
                })
            })
            .collect(),
    }
}

fn listed(gpus: &[Gpu]) -> String {
    if gpus.is_empty() {
        return "none".into();
    }
    let indices: Vec<String> = gpus.iter().map(|g| g.index.to_string()).collect();
    indices.join(", ")
}

/// The host's NVIDIA GPUs: `nvidia-smi` run with [`QUERY_FIELDS`]. No
/// `nvidia-smi` on PATH: none. One that fails: an error with its words
/// (the caller decides whether that matters).
pub async fn detect() -> Result<Vec<Gpu>, GpuError> {
    let mut command = tokio::process::Command::new("nvidia-smi");
    command
        .arg(format!("--query-gpu={QUERY_FIELDS}"))
        .arg("--format=csv,noheader,nounits")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = match tokio::time::timeout(SMI_TIMEOUT, command.output()).await {
        Err(_) => return Err(GpuError::Smi(format!("no answer in {SMI_TIMEOUT:?}"))),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Ok(Err(e)) => return Err(GpuError::Smi(e.to_string())),
        Ok(Ok(output)) => output,
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let said = [stdout.trim(), stderr.trim()]
            .into_iter()
            .find(|s| !s.is_empty())
            .unwrap_or("no output");
        return Err(GpuError::Smi(format!("{} ({said})", output.status)));
    }
    parse_query(&stdout)
}

#[cfg(test)]
mod tests;
