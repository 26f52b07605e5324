//! CPU lists (`0-3,8`, the `taskset -c` syntax): how the master's local mode
//! splits its machine's cores among workers, and what `tunefleet-worker
//! --cpus` accepts. Pure: the pinning itself is the worker's.

use std::fmt;

/// A parsed CPU list such as `0-3,8,10-11` (the `taskset -c` syntax).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuSet(Vec<usize>);

/// Linux's `cpu_set_t` holds 1024 CPUs.
const MAX_CPU: usize = 1023;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CpuSetError {
    #[error("`{0}` is not a CPU list (expected e.g. 0-3,8)")]
    Syntax(String),
    #[error("CPU {0} is out of range (0 to {MAX_CPU})")]
    OutOfRange(usize),
    #[error("the CPU list is empty")]
    Empty,
}

impl CpuSet {
    pub fn parse(text: &str) -> Result<CpuSet, CpuSetError> {
        let mut cpus = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let number = |s: &str| {
                s.trim()
                    .parse::<usize>()
                    .map_err(|_| CpuSetError::Syntax(text.to_string()))
            };
            let (first, last) = match part.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => (number(part)?, number(part)?),
            };
            if first > last {
                return Err(CpuSetError::Syntax(text.to_string()));
            }
            if last > MAX_CPU {
                return Err(CpuSetError::OutOfRange(last));
            }
            cpus.extend(first..=last);
        }
        cpus.sort_unstable();
        cpus.dedup();
        if cpus.is_empty() {
            return Err(CpuSetError::Empty);
        }
        Ok(CpuSet(cpus))
    }

    pub fn from_cpus(cpus: impl IntoIterator<Item = usize>) -> Result<CpuSet, CpuSetError> {
        let text = cpus
            .into_iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",");
        CpuSet::parse(&text)
    }

    pub fn cpus(&self) -> &[usize] {
        &self.0
    }
}

/// Cores a tuning worker wants: MetaSchedule builds candidates in one
/// process pool and measures them in another, so one core leaves either the
/// builder or the runner waiting.
pub const CORES_PER_TUNING_WORKER: usize = 2;

/// `--local-workers auto`: one worker per two cores, at least one.
pub fn auto_worker_count(cores: usize) -> usize {
    (cores / CORES_PER_TUNING_WORKER).max(1)
}

/// Splits `cpus` into `n` contiguous groups whose sizes differ by at most one
/// (neighbouring CPUs are more likely to share a cache). With more workers
/// than CPUs, CPUs are dealt out round-robin and workers share them.
pub fn split_among(cpus: &CpuSet, n: usize) -> Vec<CpuSet> {
    let all = cpus.cpus();
    if n == 0 {
        return Vec::new();
    }
    if n > all.len() {
        return (0..n).map(|i| CpuSet(vec![all[i % all.len()]])).collect();
    }
    let (base, extra) = (all.len() / n, all.len() % n);
    let mut start = 0;
    (0..n)
        .map(|i| {
            let size = base + usize::from(i < extra);
            let group = CpuSet(all[start..start + size].to_vec());
            start += size;
            group
        })
        .collect()
}

/// Prints the compact `taskset -c` form: `0-3,8`.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut i = 0;
        while i < self.0.len() {
            let start = self.0[i];
            let mut end = start;
            while i + 1 < self.0.len() && self.0[i + 1] == end + 1 {
                i += 1;
                end = self.0[i];
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
