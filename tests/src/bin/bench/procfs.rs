//! What the bench reads about the master process from `/proc` (Linux).

/// A field of `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`), 0 if unreadable.
pub(crate) fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

pub(crate) fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS")
}

/// CPU time the process has used, all threads, in nanoseconds: the sum of
/// each thread's `schedstat` run time (nanosecond resolution, where
/// `/proc/PID/stat` counts 10 ms ticks). Threads that already exited are
/// not counted, so take differences over a window where none exit.
pub(crate) fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

pub(crate) fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}
