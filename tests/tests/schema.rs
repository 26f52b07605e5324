//! `docs/protocol.schema.json` is generated from the `shared` protocol types;
//! this test fails when the committed file no longer matches them.
//!
//! Regenerate with:
//!
//! ```sh
//! UPDATE_SCHEMA=1 cargo test -p tunefleet-tests --test schema
//! ```

use serde_json::Value;
use tunefleet_shared::protocol::{json_schema, PROTOCOL_VERSION};

fn schema_path() -> std::path::PathBuf {
    tunefleet_tests::repo_root().join("docs/protocol.schema.json")
}

fn generated() -> String {
    let mut text = serde_json::to_string_pretty(&json_schema()).expect("schema serialises");
    text.push('\n');
    text
}

#[test]
fn committed_schema_matches_the_protocol_types() {
    let path = schema_path();
    let fresh = generated();
    if std::env::var_os("UPDATE_SCHEMA").is_some_and(|v| v != "0") {
        std::fs::write(&path, &fresh).expect("write docs/protocol.schema.json");
        eprintln!("wrote {}", path.display());
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != fresh {
        let first_difference = committed
            .lines()
            .zip(fresh.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || "one file is a prefix of the other".to_string(),
                |i| format!("first difference at line {}", i + 1),
            );
        panic!(
            "docs/protocol.schema.json is stale ({first_difference}): the protocol types in \
             shared/src/protocol.rs changed. Regenerate it with\n\n    \
             UPDATE_SCHEMA=1 cargo test -p tunefleet-tests --test schema\n\n\
             and describe the change in docs/PROTOCOL.md (a change that is not additive \
             needs a PROTOCOL_VERSION bump)."
        );
    }
}

/// The schema names every message type of both roles, and the version.
#[test]
fn schema_covers_every_message_type() {
    let schema = json_schema();
    assert_eq!(schema["x-protocol-version"], PROTOCOL_VERSION);
    let text = schema.to_string();
    for name in [
        // worker → master
        "register",
        "request_job",
        "progress",
        "result",
        "job_failed",
        // master → worker
        "registered",
        "assign",
        "cancel",
        "ack",
        // client → master
        "hello",
        "subscribe",
        "submit",
        "status",
        "results",
        "retry",
        "shutdown",
        // master → client
        "reply",
        "error",
        "snapshot",
        "event",
        // reply bodies, events, error codes
        "welcome",
        "shutting_down",
        "job_updated",
        "worker_left",
        "rate_limited",
        "stale_token",
    ] {
        assert!(
            text.contains(&format!("\"{name}\"")),
            "`{name}` is missing from the schema"
        );
    }
    let defs = schema["$defs"].as_object().expect("$defs");
    for name in [
        "WorkerMessage",
        "MasterMessage",
        "ClientRequest",
        "ServerMessage",
        "Target",
        "Workload",
    ] {
        assert!(defs.contains_key(name), "`{name}` is not a definition");
    }
    assert_eq!(schema["anyOf"].as_array().map(Vec::len), Some(4));
    // Secrets are plain strings in the schema, not leaked example values.
    assert!(matches!(&schema["$defs"]["WorkerHello"], Value::Object(_)));
}

/// Every ```json block of docs/PROTOCOL.md is a message of the protocol: it
/// parses into one of the four message types, and re-serialises to the same
/// JSON apart from fields the block leaves out (optional ones).
#[test]
fn every_json_example_in_the_protocol_doc_parses() {
    use tunefleet_shared::protocol::{ClientRequest, MasterMessage, ServerMessage, WorkerMessage};
    let doc = std::fs::read_to_string(tunefleet_tests::repo_root().join("docs/PROTOCOL.md"))
        .expect("docs/PROTOCOL.md");
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        match (&mut current, line.trim_start()) {
            (None, "```json") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(
        blocks.len() >= 30,
        "found only {} json blocks",
        blocks.len()
    );
    for block in &blocks {
        let value: Value =
            serde_json::from_str(block).unwrap_or_else(|e| panic!("not JSON ({e}):\n{block}"));
        let parsed = [
            parse_as::<WorkerMessage>(&value),
            parse_as::<MasterMessage>(&value),
            parse_as::<ClientRequest>(&value),
            parse_as::<ServerMessage>(&value),
        ];
        // A message may parse as more than one type (unknown fields are
        // ignored): it must round-trip through at least one.
        let fits = parsed.iter().flatten().any(|full| is_subset(&value, full));
        assert!(
            fits,
            "not a protocol message (or a field is misspelt):\n{block}"
        );
    }
}

fn parse_as<T: serde::de::DeserializeOwned + serde::Serialize>(value: &Value) -> Option<Value> {
    let parsed: T = serde_json::from_value(value.clone()).ok()?;
    serde_json::to_value(parsed).ok()
}

/// Everything in `doc` is in `full` with the same value.
fn is_subset(doc: &Value, full: &Value) -> bool {
    match (doc, full) {
        (Value::Object(d), Value::Object(f)) => d
            .iter()
            .all(|(key, value)| f.get(key).is_some_and(|other| is_subset(value, other))),
        (Value::Array(d), Value::Array(f)) => {
            d.len() == f.len() && d.iter().zip(f).all(|(a, b)| is_subset(a, b))
        }
        _ => doc == full,
    }
}
