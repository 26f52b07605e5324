use super::*;

fn sample() -> (FleetMetrics, ServerMetrics) {
    let mut fleet = FleetMetrics::default();
    fleet.jobs.insert(JobState::Queued, 3);
    fleet.jobs.insert(JobState::Done, 7);
    fleet
        .queued_by_target
        .insert(r#"{"kind":"llvm","mcpu":"znver3"}"#.into(), 3);
    fleet.workers_busy = 2;
    fleet.workers_idle = 1;
    fleet.counters.assignments = 9;
    let server = ServerMetrics {
        connections_open: 4,
        connections_max: 1024,
        subscribers: 1,
        process: ProcessMetrics::read(1.5),
    };
    (fleet, server)
}

#[test]
fn every_job_state_is_a_series_even_when_zero() {
    let (fleet, server) = sample();
    let text = render(&fleet, &server);
    for line in [
        "tunefleet_jobs{state=\"queued\"} 3",
        "tunefleet_jobs{state=\"assigned\"} 0",
        "tunefleet_jobs{state=\"running\"} 0",
        "tunefleet_jobs{state=\"done\"} 7",
        "tunefleet_jobs{state=\"failed\"} 0",
        "tunefleet_jobs{state=\"cancelled\"} 0",
        "tunefleet_workers{state=\"busy\"} 2",
        "tunefleet_workers{state=\"idle\"} 1",
        "tunefleet_assignments_total 9",
        "tunefleet_connections 4",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing `{line}` in\n{text}"
        );
    }
}

#[test]
fn label_values_are_escaped() {
    let (fleet, server) = sample();
    let text = render(&fleet, &server);
    assert!(
        text.contains(
            r#"tunefleet_queued_jobs{target="{\"kind\":\"llvm\",\"mcpu\":\"znver3\"}"} 3"#
        ),
        "{text}"
    );
    assert_eq!(label("x", "a\\b\nc"), r#"{x="a\\b\nc"}"#);
}

#[test]
fn each_family_is_declared_once_before_its_samples() {
    let (fleet, server) = sample();
    let text = render(&fleet, &server);
    let mut declared = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split_whitespace().next().unwrap();
            assert!(declared.insert(name.to_string()), "{name} declared twice");
        } else if !line.starts_with('#') {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(declared.contains(name), "{name} sampled before its TYPE");
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "bad value in `{line}`");
        }
    }
}

#[cfg(target_os = "linux")]
#[test]
fn the_process_reads_its_own_figures() {
    let p = ProcessMetrics::read(0.0).expect("/proc is there on Linux");
    assert!(p.resident_bytes > 1 << 20, "{p:?}");
    assert!(p.virtual_bytes >= p.resident_bytes, "{p:?}");
    assert!(p.open_fds >= 3, "{p:?}");
}
