use super::*;

#[test]
fn a_call_is_timed_while_it_runs_and_forgotten_after() {
    let clock = Arc::new(CallClock::default());
    assert_eq!(clock.running_for(), None);
    {
        let _call = Arc::clone(&clock).start_owned();
        {
            let _inner = Arc::clone(&clock).start_owned();
        }
        std::thread::sleep(Duration::from_millis(20));
        let ran = clock.running_for().expect("a call runs");
        assert!(ran >= Duration::from_millis(20), "{ran:?}");
    }
    assert_eq!(clock.running_for(), None);
}
