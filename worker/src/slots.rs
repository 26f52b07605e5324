//! Several registrations in one process: a worker with a slot per GPU (and
//! perhaps the CPU) runs one [`run_worker`] per slot ([`crate::devices`]
//! says why one per slot), and they start and stop together.
//!
//! One shutdown ends them all, and so does a slot's fatal error (a refused
//! secret, a protocol mismatch: the others would meet it too); a slot that
//! merely ends (`--max-jobs`) leaves the others running. The first error is
//! returned once every slot has stopped.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::session::{run_worker, WorkerConfig, WorkerError, WorkerStats};

/// Runs every config until `shutdown` completes, one of them fails, or all
/// have ended on their own. Returns their stats in config order.
pub async fn run_slots(
    configs: Vec<WorkerConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Vec<WorkerStats>, WorkerError> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let signal = {
        let stop_tx = Arc::clone(&stop_tx);
        tokio::spawn(async move {
            shutdown.await;
            stop_tx.send_replace(true);
        })
    };
    let mut set = JoinSet::new();
    for (i, config) in configs.into_iter().enumerate() {
        let mut stop = stop_rx.clone();
        let stop_tx = Arc::clone(&stop_tx);
        set.spawn(async move {
            let stopped = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            let outcome = run_worker(config, stopped).await;
            if outcome.is_err() {
                stop_tx.send_replace(true);
            }
            (i, outcome)
        });
    }
    let mut results = Vec::new();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(done) => results.push(done),
            Err(e) => tracing::error!(error = %e, "a worker slot's task ended abnormally"),
        }
    }
    signal.abort();
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, outcome)| outcome).collect()
}

#[cfg(test)]
mod tests;
