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
mod tests;
