//! Named admin tokens, as a team uses them: the master's admin creates one
//! per person, their submissions and cancels carry their name in the results
//! and the trace, the token survives a restart, only the master's own token
//! manages tokens, and a revoked token stops working.

use std::process::{Command, Output};

use tunefleet_tests::*;

fn cli_as(master: &Master, token: &str, args: &[&str]) -> Output {
    Command::new(bin("tunefleet"))
        .args(args)
        .args(["--server", &master.url()])
        .env("TUNEFLEET_TOKEN", token)
        .output()
        .expect("run tunefleet")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_tokens_say_who_did_what_and_can_be_revoked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut master = Master::start(dir.path(), &[]);
    let alice = ok(&master.cli(&["token", "create", "alice"]))
        .trim()
        .to_string();
    assert!(alice.starts_with("tft_") && alice.len() > 40, "{alice}");
    let bad = master.cli(&["token", "create", "bad name"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not allowed"));

    // Alice submits; the admin cancels one of her jobs.
    let file = dir.path().join("alice.yaml");
    std::fs::write(&file, matmul_yaml(2, "al")).expect("write");
    let report: serde_json::Value = serde_json::from_str(&ok(&cli_as(
        &master,
        &alice,
        &["submit", file.to_str().expect("path"), "--json"],
    )))
    .expect("json");
    let victim = report[0]["new_jobs"][1]
        .as_str()
        .expect("job id")
        .to_string();
    let mut admin = master.client().await;
    admin.cancel(&victim).await.expect("the admin cancels");
    let _ = admin.close().await;

    // Alice cannot manage tokens.
    let denied = cli_as(&master, &alice, &["token", "create", "mallory"]);
    assert!(!denied.status.success());
    assert!(
        String::from_utf8_lossy(&denied.stderr).contains("only the master's own admin token"),
        "{}",
        String::from_utf8_lossy(&denied.stderr)
    );

    // Names survive a restart (hashes in the state database).
    master.restart();
    let listed = ok(&master.cli(&["token", "list", "--json"]));
    assert!(listed.contains("\"alice\""), "{listed}");
    assert!(
        !listed.contains(&alice),
        "the token itself is never shown again"
    );
    let rows: serde_json::Value = serde_json::from_str(&ok(&cli_as(
        &master,
        &alice,
        &["results", "--format", "json"],
    )))
    .expect("results json");
    let rows = rows.as_array().expect("array");
    let cancelled = rows
        .iter()
        .find(|r| r["job_id"] == victim.as_str())
        .expect("the cancelled job");
    let actions: Vec<(String, String)> = cancelled["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .map(|a| {
            (
                a["action"].as_str().unwrap_or_default().to_string(),
                a["by"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("submit".into(), "alice".into()),
            ("cancel".into(), "admin".into())
        ]
    );
    let trace = ok(&Command::new(bin("tunefleet"))
        .args(["export-trace", "--state", &master.state])
        .output()
        .expect("export-trace"));
    assert!(trace.contains("\"by\":\"alice\""), "{trace}");
    assert!(trace.contains("\"state\":\"cancelled\"") && trace.contains("\"by\":\"admin\""));

    // Revoked: refused at the next connection.
    ok(&master.cli(&["token", "revoke", "alice"]));
    let refused = cli_as(&master, &alice, &["status"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("unauthorized"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(ok(&master.cli(&["token", "list"])).contains("no named tokens"));
}
