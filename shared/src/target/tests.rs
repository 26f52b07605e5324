/// Regression (fuzz/artifacts, target_text): a legacy string whose
/// options set `kind` gave a target whose text did not parse back.
#[test]
fn a_kind_option_in_the_legacy_form_is_refused() {
    let found = "llvm2 --mcp\t\x0b-kind -mccp\t\x0b-&3-m -mcuNNNNNm -m";
    for text in [found, "llvm -kind", "llvm -kind=cuda"] {
        let err = super::Target::parse(text).unwrap_err().to_string();
        assert!(err.contains("`-kind` is not an option"), "{text}: {err}");
    }
}

/// Found by fuzzing (10 million runs of `target_text`): a number too
/// large for an integer was parsed to one float and printed as text
/// that parsed to the next one, so the target's canonical text named
/// another target. serde_json's `float_roundtrip` parses exactly.
#[test]
fn a_huge_number_prints_back_as_the_same_target() {
    let found = format!(r#"{{"kind":"l","mm\\,71":{}2}}"#, "6".repeat(44));
    for text in [
        found.as_str(),
        r#"{"kind":"llvm","x":1e400}"#,
        r#"{"kind":"llvm","x":0.1}"#,
    ] {
        let Ok(target) = Target::parse(text) else {
            continue;
        };
        let again = Target::parse(&target.to_string()).unwrap();
        assert_eq!(again, target, "{text}");
    }
}

#[test]
fn completion_fills_only_what_the_job_leaves_open() {
    let worker = Target::parse(r#"{"kind":"llvm","mcpu":"znver3","num-cores":2}"#).unwrap();
    let job = Target::parse(r#"{"kind":"llvm","num-cores":1}"#).unwrap();
    let eff = job.completed_by(&worker);
    assert_eq!(
        eff.canonical_json(),
        r#"{"kind":"llvm","mcpu":"znver3","num-cores":1}"#
    );
    let cuda = Target::of_kind("cuda");
    assert_eq!(cuda.completed_by(&worker), cuda);
}

use super::*;

#[test]
fn parses_json_and_cli_forms_to_the_same_target() {
    let a = Target::parse(r#"{"kind":"llvm","num-cores":4,"mcpu":"skylake"}"#).unwrap();
    let b = Target::parse("llvm -mcpu=skylake -num-cores=4").unwrap();
    assert_eq!(a, b);
    let c = Target::parse("llvm -keys=cpu -link-params=0").unwrap();
    assert_eq!(c.attrs()["keys"], serde_json::json!(["cpu"]));
    assert_eq!(c.attrs()["link-params"], serde_json::json!(0));
}

#[test]
fn rejects_targets_without_kind() {
    assert_eq!(
        Target::parse(r#"{"mcpu":"x"}"#),
        Err(TargetError::MissingKind)
    );
    assert!(Target::parse("-mcpu=x").is_err());
    assert!(Target::parse("").is_err());
    assert!(serde_json::from_str::<Target>(r#"{"kind": 3}"#).is_err());
}

#[test]
fn job_pins_only_what_it_names() {
    let worker = Target::parse(r#"{"kind":"llvm","num-cores":2,"mcpu":"znver5"}"#).unwrap();
    assert!(worker.serves(&Target::of_kind("llvm")));
    assert!(worker.serves(&Target::parse(r#"{"kind":"llvm","num-cores":2}"#).unwrap()));
    assert!(!worker.serves(&Target::parse(r#"{"kind":"llvm","num-cores":4}"#).unwrap()));
    assert!(!worker.serves(&Target::of_kind("cuda")));
    assert!(!Target::of_kind("llvm")
        .serves(&Target::parse(r#"{"kind":"llvm","num-cores":2}"#).unwrap()));
}
