use super::*;

const GOOD: &str = "target: {kind: llvm}\nworkloads:\n  - name: mm64\n    op: matmul\n    shape: {m: 64, n: 64, k: 64}\n  - name: mm32\n    op: matmul\n    shape: {m: 32, n: 32, k: 32}\n";

#[test]
fn known_jobs_are_marked_as_duplicates() {
    let Checked::Valid { rows, .. } = check(GOOD, "good.yaml", &HashSet::new()) else {
        panic!()
    };
    assert!(rows.iter().all(|r| !r.known));
    let known: HashSet<&str> = [rows[1].job_id.as_str()].into();
    let Checked::Valid { rows, .. } = check(GOOD, "good.yaml", &known) else {
        panic!()
    };
    assert_eq!(
        rows.iter().map(|r| r.known).collect::<Vec<_>>(),
        [false, true]
    );
}
