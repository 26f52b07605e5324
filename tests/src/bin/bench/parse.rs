//! `tunefleet-bench parse`: how long the master takes to read a round's
//! workload file (as many one-line workloads as a file may hold), on the
//! YAML fast path and, for the same content, on serde-saphyr's (one `!!int`
//! tag sends the whole file there: the fast path declines tags).

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tunefleet_shared::workload::parse_workload_file;

const RUNS: usize = 7;

pub(crate) fn run(jobs: usize) -> anyhow::Result<()> {
    let fast = super::yaml(jobs, 1);
    let tagged = fast.replacen("trials: 1\n", "trials: !!int 1\n", 1);
    if tagged == fast {
        bail!("the round's file has no `trials: 1` line to tag");
    }
    println!("reading a workload file of {jobs} one-line workloads, {RUNS} runs each:");
    println!("| path | median | best | worst |");
    println!("| --- | --- | --- | --- |");
    for (path, text) in [("fast path", &fast), ("serde-saphyr (tagged)", &tagged)] {
        let mut times: Vec<Duration> = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let started = Instant::now();
            let workloads = parse_workload_file(text, "bench.yaml")
                .map_err(|e| anyhow::anyhow!("{e}"))
                .context("the bench's own file is invalid")?;
            times.push(started.elapsed());
            if workloads.len() != jobs {
                bail!("expected {jobs} workloads, read {}", workloads.len());
            }
        }
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "| {path} | {:.0} ms | {:.0} ms | {:.0} ms |",
            ms(times[RUNS / 2]),
            ms(times[0]),
            ms(times[RUNS - 1])
        );
    }
    Ok(())
}
