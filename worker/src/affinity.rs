//! `--cpus`: pins the worker process to a set of CPUs before anything starts.
//!
//! Why in the worker and not in whoever launches it: the pin must be in place
//! before the first thread exists (threads inherit the mask they are created
//! with), so that the Tokio runtime, the Python driver and its builder and
//! runner pools all stay on the worker's own cores, and so that `--target
//! auto` counts exactly those cores as `num-cores`. The master's local mode
//! (`tunefleet serve --local-workers`) and a user's own scripts both just pass
//! the flag.

pub use tunefleet_shared::cpus::CpuSet;

#[derive(Debug, thiserror::Error)]
#[error("cannot pin this process to CPUs {cpus}: {reason}")]
pub struct PinError {
    pub cpus: CpuSet,
    pub reason: String,
}

/// Pins the calling thread, and every thread and process it later
/// creates, to these CPUs. Call it before starting any runtime.
#[cfg(target_os = "linux")]
pub fn pin_current_process(cpus: &CpuSet) -> Result<(), PinError> {
    // SAFETY: `cpu_set_t` is plain old data, zeroed is its empty value;
    // CPU_SET is given indices checked against 1023 by `CpuSet` (< CPU_SETSIZE);
    // sched_setaffinity reads exactly size_of::<cpu_set_t>() bytes.
    let result = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus.cpus() {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if result == 0 {
        Ok(())
    } else {
        Err(PinError {
            cpus: cpus.clone(),
            reason: std::io::Error::last_os_error().to_string(),
        })
    }
}

#[cfg(not(target_os = "linux"))]
pub fn pin_current_process(cpus: &CpuSet) -> Result<(), PinError> {
    Err(PinError {
        cpus: cpus.clone(),
        reason: "CPU pinning is only supported on Linux".into(),
    })
}

#[cfg(test)]
mod tests;
