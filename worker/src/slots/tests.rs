use super::*;
use crate::backend::SimBackend;
use std::time::Duration;
use tunefleet_shared::target::Target;

fn config(server: &str) -> WorkerConfig {
    let backend = Arc::new(SimBackend::new(Duration::ZERO));
    let mut config = WorkerConfig::new(server, Target::of_kind("cuda"), "w", backend);
    config.backoff.initial = Duration::from_millis(5);
    config.backoff.max = Duration::from_millis(20);
    config
}

// Nothing listens on port 1 of loopback: a slot keeps retrying.
const UNREACHABLE: &str = "ws://127.0.0.1:1";

#[tokio::test]
async fn one_shutdown_stops_every_slot() {
    let shutdown = tokio::time::sleep(Duration::from_millis(100));
    let stats = tokio::time::timeout(
        Duration::from_secs(10),
        run_slots(vec![config(UNREACHABLE), config(UNREACHABLE)], shutdown),
    )
    .await
    .expect("stops promptly")
    .expect("no slot failed");
    assert_eq!(stats.len(), 2);
    assert!(stats.iter().all(|s| s.registrations == 0));
}

#[tokio::test]
async fn a_fatal_error_of_one_slot_stops_the_others_and_is_returned() {
    let never = std::future::pending::<()>();
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        run_slots(vec![config(UNREACHABLE), config("not-a-url")], never),
    )
    .await
    .expect("stops promptly");
    assert!(
        matches!(outcome, Err(WorkerError::InvalidServerUrl { .. })),
        "{outcome:?}"
    );
}
