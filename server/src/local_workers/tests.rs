use super::*;

fn cpus(text: &str) -> CpuSet {
    CpuSet::parse(text).unwrap()
}

#[test]
fn each_worker_gets_its_own_cores_a_name_and_the_extra_arguments_last() {
    let specs = plan(
        LocalWorkers::Count(2),
        &cpus("0-3"),
        "ws://127.0.0.1:9000",
        "--backend sim --sim-seconds 0.2",
    )
    .unwrap();
    assert_eq!(specs.len(), 2);
    assert_eq!(specs[0].name, "local-1");
    assert_eq!(specs[1].cpus.to_string(), "2-3");
    assert_eq!(
        specs[0].args,
        [
            "--server",
            "ws://127.0.0.1:9000",
            "--name",
            "local-1",
            "--cpus",
            "0-1",
            "--supervised",
            "--gpus",
            "none",
            "--backend",
            "sim",
            "--sim-seconds",
            "0.2"
        ]
    );
}

#[test]
fn auto_gives_one_worker_per_two_cores() {
    let url = "ws://127.0.0.1:1";
    assert_eq!(
        plan(LocalWorkers::Auto, &cpus("0-7"), url, "")
            .unwrap()
            .len(),
        4
    );
    let one = plan(LocalWorkers::Auto, &cpus("0"), url, "").unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].cpus.to_string(), "0");
    assert!(plan(LocalWorkers::Count(0), &cpus("0-7"), url, "")
        .unwrap()
        .is_empty());
}

#[test]
fn quoted_arguments_stay_whole() {
    let specs = plan(
        LocalWorkers::Count(1),
        &cpus("0"),
        "ws://h:1",
        "--work-dir '/tmp/my dir'",
    )
    .unwrap();
    assert_eq!(specs[0].args[specs[0].args.len() - 1], "/tmp/my dir");
}

#[test]
fn arguments_that_local_mode_sets_itself_are_refused_by_name() {
    let url = "ws://h:1";
    for (args, flag) in [
        ("--server ws://elsewhere:1", "--server"),
        ("--backend sim --cpus=0", "--cpus"),
        ("--name x", "--name"),
    ] {
        let err = plan(LocalWorkers::Count(1), &cpus("0"), url, args).unwrap_err();
        assert_eq!(err, LocalWorkersError::Reserved(flag));
        assert!(err.to_string().contains(flag), "{err}");
    }
    let err = plan(LocalWorkers::Count(1), &cpus("0"), url, "--work-dir 'oops").unwrap_err();
    assert!(err.to_string().contains("unbalanced quotes"), "{err}");
}

#[test]
fn parses_counts_and_auto() {
    assert_eq!(parse_local_workers("3"), Ok(LocalWorkers::Count(3)));
    assert_eq!(parse_local_workers("auto"), Ok(LocalWorkers::Auto));
    assert!(parse_local_workers("many").unwrap_err().contains("`many`"));
}

#[test]
fn local_workers_dial_loopback_when_the_master_binds_every_address() {
    let any: std::net::SocketAddr = "0.0.0.0:18871".parse().unwrap();
    assert_eq!(local_server_url(any, false), "ws://127.0.0.1:18871");
    let any6: std::net::SocketAddr = "[::]:5".parse().unwrap();
    assert_eq!(local_server_url(any6, false), "ws://[::1]:5");
    let lan: std::net::SocketAddr = "10.0.0.7:5".parse().unwrap();
    assert_eq!(local_server_url(lan, false), "ws://10.0.0.7:5");
    assert_eq!(local_server_url(lan, true), "wss://localhost:5");
}

#[test]
fn the_master_knows_which_cpus_it_may_use() {
    // A CPU quota (cgroups) can make available_parallelism smaller, never larger.
    let allowed = allowed_cpus();
    assert!(allowed.cpus().len() >= std::thread::available_parallelism().unwrap().get());
}

#[test]
fn forwarded_worker_lines_lose_only_their_own_timestamp() {
    assert_eq!(
        without_timestamp("2026-11-23T21:02:45.643593Z  INFO tunefleet_worker: pinned"),
        "INFO tunefleet_worker: pinned"
    );
    assert_eq!(
        without_timestamp("error: no such file"),
        "error: no such file"
    );
}
