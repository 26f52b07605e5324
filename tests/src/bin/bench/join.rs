//! `tunefleet-bench join [--jobs N] [--open K] [--joins J]`: what a worker's
//! registration costs the scheduler in a farm that kept N jobs, K of them
//! still open. Every worker re-registers after a master restart, on the
//! core thread, so this is paid once per worker of the fleet then.

use std::time::Instant;
use tunefleet_shared::protocol::Millis;

use anyhow::{bail, Context};
use tunefleet_server::scheduler::{Scheduler, SchedulerConfig, SessionId};
use tunefleet_shared::protocol::{WorkerHello, PROTOCOL_VERSION};
use tunefleet_shared::target::Target;
use tunefleet_shared::workload::parse_workload_file;

pub(crate) fn run(mut it: impl Iterator<Item = String>) -> anyhow::Result<()> {
    let (mut jobs, mut open, mut joins) = (70_000usize, 10usize, 1_000u64);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--jobs" => jobs = value()?.parse()?,
            "--open" => open = value()?.parse()?,
            "--joins" => joins = value()?.parse()?,
            other => bail!("unknown flag {other} (join flags: --jobs --open --joins)"),
        }
    }
    let mut s = Scheduler::new(SchedulerConfig::default());
    let mut out = Vec::new();
    let mut ids = Vec::new();
    // In files of 5,000: one file may hold only so many values.
    for first in (0..jobs).step_by(5_000) {
        let mut yaml = String::from("target: {kind: llvm}\ntrials: 1\nworkloads:\n");
        for i in first..(first + 5_000).min(jobs) {
            yaml.push_str(&format!(
                "  - {{name: j{i}, op: matmul, shape: {{m: {}, n: {}, k: 3}}}}\n",
                1 + i % 1000,
                1 + i / 1000
            ));
        }
        let workloads = parse_workload_file(&yaml, "join.yaml")?;
        ids.extend(s.submit(workloads, Millis(0), &mut out).0);
    }
    for id in ids.iter().skip(open.min(ids.len())) {
        s.cancel(id, Millis(1), &mut out)?;
    }
    let target = Target::parse(r#"{"kind":"llvm"}"#)?;
    let hellos: Vec<WorkerHello> = (0..joins)
        .map(|i| WorkerHello {
            protocol: PROTOCOL_VERSION,
            worker_id: format!("w{i}"),
            name: format!("w{i}"),
            target: target.clone(),
            backend: "sim".into(),
            tvm_version: None,
            secret: None,
            slots: None,
            device: None,
        })
        .collect();
    let expected = open.min(jobs);
    out.clear();
    let started = Instant::now();
    for (i, hello) in (0..).zip(&hellos) {
        let matching = s.worker_joined(SessionId(1_000 + i), hello, Millis(2), &mut out)?;
        if matching != expected {
            bail!("a worker saw {matching} open jobs, expected {expected}");
        }
    }
    let per_join = started.elapsed().as_secs_f64() * 1e6 / joins as f64;
    println!("| jobs kept | open | worker registrations | scheduler time per registration |");
    println!("| --- | --- | --- | --- |");
    println!("| {jobs} | {open} | {joins} | {per_join:.1} µs |");
    Ok(())
}
