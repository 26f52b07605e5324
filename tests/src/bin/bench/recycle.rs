//! One recycle sample: a real worker process holding a job is `kill -9`ed,
//! and we time until a spare worker's backend is handed the job and until a
//! subscriber sees it assigned to the spare.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tunefleet_server::client::Client;
use tunefleet_shared::protocol::{FleetEvent, JobState};
use tunefleet_worker::{run_worker, WorkerConfig};

use crate::{llvm, scale, subscriber, wait_workers, KillOnDrop, TOKEN};

/// Time from `kill -9` of the worker holding a job to the spare's backend
/// being handed it, and to a subscriber seeing it assigned to the spare.
pub(crate) async fn recycle_sample(
    url: &str,
    worker_bin: &Path,
    sample: usize,
) -> anyhow::Result<(Duration, Duration)> {
    let mut client = Client::connect(url, Some(TOKEN)).await?;
    let (job_id, mut victim) =
        victim_holding_a_job(&mut client, url, worker_bin, sample, 7).await?;
    let (handed_tx, mut handed) = tokio::sync::mpsc::unbounded_channel();
    let spare = tokio::spawn(run_worker(
        WorkerConfig::new(
            url,
            llvm(),
            format!("spare{sample}"),
            Arc::new(scale::Stopwatch::new(handed_tx)),
        ),
        std::future::pending::<()>(),
    ));
    wait_workers(url, 2).await?;
    // Not `Client::subscribe`: see `subscriber.rs`.
    let mut watcher = subscriber::RawSubscriber::subscribe(url).await?;
    let killed = Instant::now();
    victim.0.kill()?;
    let elapsed = loop {
        let event = tokio::time::timeout(Duration::from_secs(30), watcher.next_event())
            .await
            .context("job not recycled")??;
        // A job the watcher has changes by deltas (it subscribes with them).
        let (id, state, worker) = match &event {
            FleetEvent::JobUpdated { job } => (&job.job_id, job.state, &job.worker),
            FleetEvent::JobChanged { change } => (&change.job_id, change.state, &change.worker),
            _ => continue,
        };
        if *id == job_id
            && state.is_in_flight()
            && worker.as_deref() == Some(&format!("spare{sample}"))
        {
            break killed.elapsed();
        }
    };
    let handed = tokio::time::timeout(Duration::from_secs(10), handed.recv())
        .await
        .context("the spare was never handed the job")?
        .context("spare stopped")?
        - killed;
    let _ = victim.0.wait();
    // Let the spare finish the job before it goes, or the job is (rightly)
    // recycled again and the next sample's victim picks it up first.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let job = client.results(Some(vec![job_id.clone()])).await?;
        if job.first().is_some_and(|j| j.state == JobState::Done) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    spare.abort();
    let mut c = Client::connect(url, Some(TOKEN)).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.status().await?.workers > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((handed, elapsed))
}

/// Submits a one-job file (`n` keeps it apart from other callers' jobs) and
/// starts a real worker process, `victim{sample}`, that takes it and holds
/// it (600 s per job); returns once the master says it holds it.
pub(crate) async fn victim_holding_a_job(
    client: &mut Client,
    url: &str,
    worker_bin: &Path,
    sample: usize,
    n: u32,
) -> anyhow::Result<(String, KillOnDrop)> {
    let text = format!(
        "target: {{kind: llvm, num-cores: 2}}\ntrials: 1\nworkloads:\n  - {{name: victim{sample}, op: matmul, shape: {{m: 7, n: {n}, k: {}}}}}\n",
        100 + sample
    );
    let job_id = client
        .submit(text, None)
        .await?
        .new_jobs
        .into_iter()
        .next()
        .context("new job")?;
    let name = format!("victim{sample}");
    let mut victim = KillOnDrop(
        Command::new(worker_bin)
            .args(["--server", url, "--backend", "sim", "--sim-seconds", "600"])
            .args(["--target", r#"{"kind":"llvm","num-cores":2}"#])
            .args(["--name", &name])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("start victim worker")?,
    );
    // The victim is the only idle-able worker for this job until a spare joins.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let job = client.results(Some(vec![job_id.clone()])).await?;
        if job
            .first()
            .is_some_and(|j| j.worker.as_deref() == Some(name.as_str()))
        {
            return Ok((job_id, victim));
        }
        if Instant::now() > deadline {
            let status = client.status().await?;
            bail!(
                "victim never got the job: job {:?}, victim exited: {:?}, {} workers registered",
                job.first().map(|j| (&j.state, &j.worker, &j.errors)),
                victim.0.try_wait(),
                status.workers
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
