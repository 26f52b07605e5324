//! A SIGTERM that arrives at once after the master says it is listening
//! stops it. Tokio tells a signal only to the listeners that exist when it
//! arrives; the master used to make its listener only when the server began
//! serving, a moment after printing "listening", and a SIGTERM in between
//! was lost: the master ran on (1 start in 5 here, and CI saw it).

use tunefleet_tests::*;

#[test]
fn a_sigterm_right_after_listening_stops_the_master() {
    init_tracing();
    for attempt in 0..20 {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut master = Master::start(dir.path(), &[]);
        let status = master.terminate();
        assert!(
            status.is_some_and(|s| s.success()),
            "start {attempt}: the master did not stop cleanly within 15 s of SIGTERM ({status:?}); log:\n{}",
            master.log()
        );
    }
}
