//! What one worker process serves: a slot per GPU it was given, the host's
//! CPU, or both, each with its target and device ([`plan`]).
//!
//! Why a slot per GPU is a registration of its own (one WebSocket each, a
//! `run_worker` each) and not one registration with several targets: the
//! master already gives every registration its scheduler session, its
//! queue match and its lease rules, and a worker of this release then works
//! with masters of earlier ones unchanged. What the master does not learn
//! from the target, which card it is, goes in `register`'s `device`.
//!
//! The rules, for a TVM user with a rack of GPUs:
//! - `--target auto` (the default): one CUDA slot per GPU `--gpus` picks
//!   (all it can see by default); no GPU, or `--gpus none`: the CPU, as
//!   before GPUs existed here. `--cpu-slot` adds the CPU beside the GPUs
//!   (off by default: a CPU job measures on the cores the GPU slots build
//!   their candidates with).
//! - `--target '{"kind":"cuda",...}'`: a slot per GPU, the given attributes
//!   winning over the GPU's (an `arch` the GPU does not have is refused:
//!   its code would not run there).
//! - any other `--target`: the CPU only, as given; `--gpus` is then refused.

use tunefleet_shared::device::Device;
use tunefleet_shared::target::Target;

use crate::gpu::Gpu;

/// `--target`: detect, or as given.
#[derive(Clone, Debug, PartialEq)]
pub enum TargetChoice {
    Auto,
    Given(Target),
}

/// One registration this process makes.
#[derive(Clone, Debug, PartialEq)]
pub struct Slot {
    pub target: Target,
    pub device: Device,
    /// The GPU this slot measures on (none: the CPU).
    pub gpu: Option<Gpu>,
}

impl Slot {
    /// The name the master shows: the worker's, with `-gpuN` for a GPU
    /// slot when the process has more than one slot.
    pub fn name(&self, base: &str, slots: usize) -> String {
        match &self.gpu {
            Some(gpu) if slots > 1 => format!("{base}-gpu{}", gpu.index),
            _ => base.to_string(),
        }
    }

    /// The driver's environment: its GPU alone, by UUID (stable, where
    /// indices depend on `CUDA_DEVICE_ORDER`).
    pub fn env(&self) -> Vec<(String, String)> {
        match &self.gpu {
            Some(gpu) => vec![("CUDA_VISIBLE_DEVICES".into(), gpu.uuid.clone())],
            None => Vec::new(),
        }
    }
}

/// How [`plan`] was asked.
#[derive(Clone, Debug, Default)]
pub struct PlanOptions {
    /// `--cpu-slot`: the CPU beside the GPUs.
    pub cpu_slot: bool,
    /// `--gpus` was given (not left at its default).
    pub gpus_given: bool,
    /// The backend measures on real devices (`tvm`): a CUDA target then
    /// needs a GPU. The `sim` backend takes any target as given.
    pub needs_device: bool,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlanError {
    #[error("--gpus picks GPUs for `--target auto` or a cuda target; `{0}` is not one")]
    GpusWithCpuTarget(String),
    #[error("--target {target}: no NVIDIA GPU to run it on ({why})")]
    NoGpu { target: String, why: String },
    #[error("--target asks for arch {asked}, but GPU {index} ({name}) is {has}: its code would not run there")]
    ArchMismatch {
        asked: String,
        index: u32,
        name: String,
        has: String,
    },
    #[error(
        "--cpu-slot adds the CPU beside GPU slots; use it with `--target auto` or a cuda target"
    )]
    CpuSlotWithoutGpuTarget,
}

/// The slots for `choice` on a host with `gpus` (already selected by
/// `--gpus` and `CUDA_VISIBLE_DEVICES`) and this CPU (`host`: its target
/// and device). `no_gpu_why` says why `gpus` is empty, for the error.
pub fn plan(
    choice: &TargetChoice,
    gpus: &[Gpu],
    host: (Target, Device),
    options: &PlanOptions,
    no_gpu_why: &str,
) -> Result<Vec<Slot>, PlanError> {
    let cpu = |target: Target| Slot {
        target,
        device: host.1.clone(),
        gpu: None,
    };
    let given_cuda = match choice {
        TargetChoice::Given(t) if t.kind() != "cuda" => {
            if options.gpus_given {
                return Err(PlanError::GpusWithCpuTarget(t.to_string()));
            }
            if options.cpu_slot {
                return Err(PlanError::CpuSlotWithoutGpuTarget);
            }
            return Ok(vec![cpu(t.clone())]);
        }
        TargetChoice::Given(t) => Some(t),
        TargetChoice::Auto => None,
    };
    if gpus.is_empty() {
        return match given_cuda {
            Some(t) if options.needs_device => Err(PlanError::NoGpu {
                target: t.to_string(),
                why: no_gpu_why.to_string(),
            }),
            // The sim backend: a CUDA target as given, no card behind it.
            Some(t) => Ok(vec![Slot {
                target: t.clone(),
                device: sim_gpu(),
                gpu: None,
            }]),
            None => Ok(vec![cpu(host.0.clone())]),
        };
    }
    let mut slots = gpus
        .iter()
        .map(|gpu| gpu_slot(gpu, given_cuda))
        .collect::<Result<Vec<_>, _>>()?;
    if options.cpu_slot {
        slots.push(cpu(host.0.clone()));
    }
    Ok(slots)
}

fn gpu_slot(gpu: &Gpu, given: Option<&Target>) -> Result<Slot, PlanError> {
    let own = gpu.target();
    let target = match given {
        None => own,
        Some(given) => {
            let asked = given.attrs().get("arch").and_then(|v| v.as_str());
            if let Some(asked) = asked.filter(|a| a.trim_end_matches('a') != gpu.arch()) {
                return Err(PlanError::ArchMismatch {
                    asked: asked.to_string(),
                    index: gpu.index,
                    name: gpu.name.clone(),
                    has: gpu.arch(),
                });
            }
            given.completed_by(&own)
        }
    };
    Ok(Slot {
        target,
        device: gpu.device(),
        gpu: Some(gpu.clone()),
    })
}

/// The device a sim worker with a CUDA target shows: no card is behind it.
fn sim_gpu() -> Device {
    Device {
        kind: "gpu".into(),
        name: "simulated GPU".into(),
        memory_mib: None,
        index: None,
        uuid: None,
    }
}

/// This host's CPU as the master shows it: the model name from
/// `/proc/cpuinfo`, the cores this process may use, the host's memory.
pub fn host_cpu_device(cores: usize) -> Device {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    cpu_device(&cpuinfo, &meminfo, cores)
}

/// [`host_cpu_device`] from the two files' text (pure, for tests).
pub fn cpu_device(cpuinfo: &str, meminfo: &str, cores: usize) -> Device {
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key.trim() == "model name").then(|| value.trim().to_string())
        })
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let memory_mib = meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix("MemTotal:")?;
        let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib / 1024)
    });
    Device {
        kind: "cpu".into(),
        name: format!("{model} ({cores} cores)"),
        memory_mib,
        index: None,
        uuid: None,
    }
}

#[cfg(test)]
mod tests;
