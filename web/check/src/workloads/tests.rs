use super::*;

const GOOD: &str = "target: {kind: llvm, num-cores: 2}\ntrials: 8\nworkloads:\n  - name: mm64\n    op: matmul\n    shape: {m: 64, n: 64, k: 64}\n  - name: d\n    op: dense\n    shape: {batch: 1, in_features: 256, out_features: 128}\n    dtype: float16\n";

#[test]
fn a_valid_file_gives_preview_rows() {
    match check(GOOD, "good.yaml") {
        Checked::Valid {
            rows,
            yaml,
            converted_from_lorien,
        } => {
            assert_eq!(rows.len(), 2);
            assert_eq!(rows[0].name, "mm64");
            assert_eq!(rows[0].op, "matmul");
            assert_eq!(rows[0].shape, "m=64 n=64 k=64");
            assert_eq!(rows[0].dtype, "float32");
            assert_eq!(rows[0].target, "llvm num-cores=2");
            assert_eq!(rows[0].trials, 8);
            assert_eq!(rows[1].dtype, "float16");
            assert!(!rows[0].known);
            assert_eq!(yaml, GOOD);
            assert!(!converted_from_lorien);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn known_jobs_are_marked_as_duplicates() {
    let mut checked = check(GOOD, "good.yaml");
    let Checked::Valid { rows, .. } = &checked else {
        panic!("{checked:?}")
    };
    let second = rows[1].job_id.clone();
    checked.mark_known(|id| id == second);
    let Checked::Valid { rows, .. } = &checked else {
        panic!()
    };
    assert_eq!(
        rows.iter().map(|r| r.known).collect::<Vec<_>>(),
        [false, true]
    );
}

#[test]
fn errors_carry_line_field_and_source() {
    let bad = "target: {kind: llvm}\nworkloads:\n  - name: a\n    op: matmul\n    shape: {m: 64, n: -3, k: 64}\n  - name: b\n    op: matmal\n    shape: {m: 1, n: 1, k: 1}\n";
    let Checked::Invalid(rows) = check(bad, "bad.yaml") else {
        panic!()
    };
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0].line, Some(5));
    assert_eq!(rows[0].field.as_deref(), Some("workloads[0].shape.n"));
    assert_eq!(
        rows[0].source.as_deref(),
        Some("    shape: {m: 64, n: -3, k: 64}")
    );
    assert_eq!(rows[1].line, Some(7));
    assert!(rows[1].message.contains("matmul"), "{:?}", rows[1]);
}

#[test]
fn syntax_errors_have_a_line() {
    let Checked::Invalid(rows) = check("workloads: [\n  {name: a\n", "x.yaml") else {
        panic!()
    };
    assert!(rows[0].line.is_some(), "{rows:?}");
    assert_eq!(
        check("  \n", "x.yaml"),
        Checked::Empty,
        "blank text is not an error"
    );
}

#[test]
fn lorien_files_are_converted() {
    let text = "workload:\n- '!!python/object:lorien.workload.Workload {args: [[TENSOR, [1, 64], float32], [TENSOR, [32, 64], float32], null, float32], target: llvm, task_name: dense_nopack.x86}'\n";
    match check(text, "l.yaml") {
        Checked::Valid {
            rows,
            yaml,
            converted_from_lorien,
        } => {
            assert!(converted_from_lorien);
            assert_eq!(rows.len(), 1);
            assert_eq!(rows[0].op, "dense");
            assert!(yaml.contains("workloads:"), "{yaml}");
            // What is sent parses as our own format.
            assert_eq!(
                parse_workload_file(&yaml, "c.yaml").expect("parses").len(),
                1
            );
        }
        other => panic!("{other:?}"),
    }
}

/// The page gets these as JSON from the checker module: nothing may be lost
/// on the way.
#[test]
fn every_answer_survives_the_trip_as_json() {
    let bad = "workloads:\n  - name: a\n    op: matmal\n";
    for checked in [
        check(GOOD, "good.yaml"),
        check(bad, "bad.yaml"),
        Checked::Empty,
        Checked::failed("the checker did not load".into()),
    ] {
        let wire: Result<Checked, String> = Ok(checked.clone());
        let json = serde_json::to_string(&wire).expect("encode");
        let back: Result<Checked, String> = serde_json::from_str(&json).expect("decode");
        assert_eq!(back, Ok(checked));
    }
}
