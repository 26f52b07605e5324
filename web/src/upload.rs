//! Checking a workload file in the browser before it is sent. The check itself
//! (the master's parser, the Lorien reader) lives in the checker module
//! `web-check`, which the page fetches when the upload box is first used;
//! here is what the page adds: which rows the master already has, and the
//! texts around a submit.

use std::collections::HashSet;

pub use web_check::workloads::{Checked, ErrorRow, PreviewRow};

/// [`web_check::workloads::check`] with the rows the master already has
/// marked (`known` holds its job ids). The page gets the check from the
/// checker module and marks the rows itself; tests use this.
pub fn check(text: &str, filename: &str, known: &HashSet<&str>) -> Checked {
    let mut checked = web_check::workloads::check(text, filename);
    checked.mark_known(|id| known.contains(id));
    checked
}

#[cfg(test)]
mod tests {
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
}
