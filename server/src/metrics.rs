//! `GET /metrics`: what a scaler needs to size the fleet, in Prometheus'
//! text format (version 0.0.4).
//!
//! The core fills a [`FleetMetrics`] (job counts per state, queued jobs per
//! target, busy and idle workers, its own counters); the network layer adds
//! what only it knows (open connections, subscribers) and the process's own
//! figures from /proc. Rendering is a pure function, tested against the
//! exposition rules (HELP/TYPE once per family, escaped label values).

use std::collections::BTreeMap;
use std::fmt::Write;

use tunefleet_shared::protocol::JobState;

/// Counters the core keeps while it runs (reset when the master restarts,
/// as Prometheus counters may be).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoreCounters {
    /// Jobs handed to a worker (an `assign` message sent).
    pub assignments: u64,
    pub worker_joins: u64,
    pub worker_leaves: u64,
    /// Fleet events published to subscribers.
    pub events: u64,
    /// Batches committed to the state database.
    pub commits: u64,
    /// Batches whose commit failed: every request in one was refused and
    /// the batch rolled back.
    pub commits_failed: u64,
}

/// The core's part of the metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetMetrics {
    /// Every state, zero included, so a query never finds a series missing.
    pub jobs: BTreeMap<JobState, u64>,
    /// Queued jobs by the target they ask for (as JSON, the protocol's form).
    pub queued_by_target: BTreeMap<String, u64>,
    pub workers_busy: u64,
    pub workers_idle: u64,
    pub model_runs_active: u64,
    /// Of `jobs`, those archived (`--job-retention`): in the database only.
    pub jobs_archived: u64,
    /// 1 while the store cannot commit (changes are refused, reads answered
    /// from memory), else 0.
    pub storage_degraded: u64,
    pub counters: CoreCounters,
}

/// What the network layer and the process add.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerMetrics {
    pub connections_open: u64,
    pub connections_max: u64,
    pub subscribers: u64,
    pub process: Option<ProcessMetrics>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessMetrics {
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub cpu_seconds: f64,
    pub open_fds: u64,
    pub max_fds: Option<u64>,
    pub start_time_seconds: f64,
}

impl ProcessMetrics {
    /// Reads /proc/self; `None` where there is no /proc.
    pub fn read(start_time_seconds: f64) -> Option<ProcessMetrics> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The command name (field 2) may hold spaces; fields resume after its ')'.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
        // utime and stime count USER_HZ ticks, which Linux fixes at 100 for userspace.
        let ticks = field(14)? + field(15)?;
        let page = 4096;
        let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
        let max_fds = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|limits| {
                limits
                    .lines()
                    .find(|l| l.starts_with("Max open files"))
                    .and_then(|l| l.split_whitespace().nth(3))
                    .and_then(|soft| soft.parse().ok())
            });
        Some(ProcessMetrics {
            resident_bytes: field(24)? * page,
            virtual_bytes: field(23)?,
            cpu_seconds: ticks as f64 / 100.0,
            open_fds,
            max_fds,
            start_time_seconds,
        })
    }
}

/// Prometheus text exposition of everything above.
pub fn render(fleet: &FleetMetrics, server: &ServerMetrics) -> String {
    let mut out = Exposition(String::new());
    fleet_gauges(&mut out, fleet);
    core_counters(&mut out, &fleet.counters);
    storage_and_connections(&mut out, fleet, server);
    if let Some(p) = &server.process {
        process_families(&mut out, p);
    }
    out.0
}

/// The text being written: one family at a time, HELP and TYPE once each.
struct Exposition(String);

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str, samples: &[(String, String)]) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(self.0, "{name}{labels} {value}");
        }
    }
}

/// The one sample of a family without labels.
fn plain(v: u64) -> Vec<(String, String)> {
    vec![(String::new(), v.to_string())]
}

/// What the fleet holds now: jobs by state and by queue, workers, model runs.
fn fleet_gauges(out: &mut Exposition, fleet: &FleetMetrics) {
    let jobs: Vec<_> = JobState::ALL
        .iter()
        .map(|state| {
            let n = fleet.jobs.get(state).copied().unwrap_or(0);
            (label("state", state.as_str()), n.to_string())
        })
        .collect();
    out.family(
        "tunefleet_jobs",
        "gauge",
        "Jobs by state (archived ones included).",
        &jobs,
    );
    out.family(
        "tunefleet_jobs_archived",
        "gauge",
        "Ended jobs archived by --job-retention: kept in the database, not in memory.",
        &plain(fleet.jobs_archived),
    );
    let queued: Vec<_> = fleet
        .queued_by_target
        .iter()
        .map(|(target, n)| (label("target", target), n.to_string()))
        .collect();
    out.family(
        "tunefleet_queued_jobs",
        "gauge",
        "Queued jobs by the target they ask for (a worker must complete it to take them).",
        &queued,
    );
    out.family(
        "tunefleet_workers",
        "gauge",
        "Connected workers, busy (holding a job) or idle.",
        &[
            (label("state", "busy"), fleet.workers_busy.to_string()),
            (label("state", "idle"), fleet.workers_idle.to_string()),
        ],
    );
    out.family(
        "tunefleet_model_runs_active",
        "gauge",
        "Model runs not yet finished, failed or stopped.",
        &plain(fleet.model_runs_active),
    );
}

/// What the core counted since the master started.
fn core_counters(out: &mut Exposition, c: &CoreCounters) {
    out.family(
        "tunefleet_assignments_total",
        "counter",
        "Jobs handed to workers since the master started (dispatches).",
        &plain(c.assignments),
    );
    out.family(
        "tunefleet_worker_joins_total",
        "counter",
        "Worker registrations since the master started.",
        &plain(c.worker_joins),
    );
    out.family(
        "tunefleet_worker_leaves_total",
        "counter",
        "Workers lost or gone since the master started.",
        &plain(c.worker_leaves),
    );
    out.family(
        "tunefleet_events_total",
        "counter",
        "Fleet events published to subscribers since the master started.",
        &plain(c.events),
    );
    out.family(
        "tunefleet_commits_total",
        "counter",
        "Batches committed to the state database since the master started.",
        &plain(c.commits),
    );
    out.family(
        "tunefleet_commits_failed_total",
        "counter",
        "Batches whose commit failed (each of their requests refused, nothing applied).",
        &plain(c.commits_failed),
    );
}

/// Whether the store can commit, then the network layer's connections.
fn storage_and_connections(out: &mut Exposition, fleet: &FleetMetrics, server: &ServerMetrics) {
    out.family(
        "tunefleet_storage_degraded",
        "gauge",
        "1 while the state database cannot commit (changes refused with storage_unavailable, reads served from memory), else 0.",
        &plain(fleet.storage_degraded),
    );
    out.family(
        "tunefleet_connections",
        "gauge",
        "Open WebSocket connections, workers and clients together.",
        &plain(server.connections_open),
    );
    out.family(
        "tunefleet_connections_max",
        "gauge",
        "The --max-connections limit.",
        &plain(server.connections_max),
    );
    out.family(
        "tunefleet_subscribers",
        "gauge",
        "Clients subscribed to fleet events (dashboards, watch).",
        &plain(server.subscribers),
    );
}

/// The standard `process_*` families, named as Prometheus' client libraries
/// name them so that existing dashboards find them.
fn process_families(out: &mut Exposition, p: &ProcessMetrics) {
    out.family(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        &plain(p.resident_bytes),
    );
    out.family(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        &plain(p.virtual_bytes),
    );
    out.family(
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
        &[(String::new(), format!("{:.2}", p.cpu_seconds))],
    );
    out.family(
        "process_open_fds",
        "gauge",
        "Number of open file descriptors.",
        &plain(p.open_fds),
    );
    if let Some(max) = p.max_fds {
        out.family(
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            &plain(max),
        );
    }
    out.family(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since the Unix epoch in seconds.",
        &[(String::new(), format!("{:.3}", p.start_time_seconds))],
    );
}

/// `{name="value"}` with the value escaped as the format requires.
fn label(name: &str, value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    format!("{{{name}=\"{escaped}\"}}")
}

#[cfg(test)]
mod tests;
