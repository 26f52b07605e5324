//! A workload file's problems, each located (file, line, field), and all of
//! them together.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One problem in a workload file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[error("{}", Shown(self))]
pub struct WorkloadError {
    /// The file name given to [`parse_workload_file`](super::parse_workload_file).
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column (in characters), when known.
    pub column: Option<usize>,
    /// Path of the offending field, e.g. `workloads[1].shape.height`.
    pub field: Option<String>,
    pub message: String,
}

/// Display helpers (thiserror's `fmt =` form is only available for enums).
pub(super) struct Shown<'a>(&'a WorkloadError);
pub(super) struct ShownAll<'a>(&'a WorkloadErrors);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_workload_error(self.0, f)
    }
}

impl fmt::Display for ShownAll<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_workload_errors(self.0, f)
    }
}

pub(super) fn fmt_workload_error(e: &WorkloadError, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let mut located = false;
    if !e.file.is_empty() {
        f.write_str(&e.file)?;
        located = true;
    }
    if let Some(line) = e.line {
        if located {
            write!(f, ":{line}")?;
        } else {
            write!(f, "line {line}")?;
        }
        located = true;
    }
    if located {
        f.write_str(": ")?;
    }
    if let Some(field) = &e.field {
        write!(f, "{field}: ")?;
    }
    f.write_str(&e.message)
}

/// Every problem found in a workload file. `Display` prints one per line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[error("{}", ShownAll(self))]
pub struct WorkloadErrors {
    pub errors: Vec<WorkloadError>,
}

pub(super) fn fmt_workload_errors(e: &WorkloadErrors, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    for (i, err) in e.errors.iter().enumerate() {
        if i > 0 {
            f.write_str("\n")?;
        }
        fmt_workload_error(err, f)?;
    }
    Ok(())
}

impl WorkloadErrors {
    pub fn iter(&self) -> std::slice::Iter<'_, WorkloadError> {
        self.errors.iter()
    }

    pub fn len(&self) -> usize {
        self.errors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn first(&self) -> Option<&WorkloadError> {
        self.errors.first()
    }
}

impl IntoIterator for WorkloadErrors {
    type Item = WorkloadError;
    type IntoIter = std::vec::IntoIter<WorkloadError>;
    fn into_iter(self) -> Self::IntoIter {
        self.errors.into_iter()
    }
}

impl<'a> IntoIterator for &'a WorkloadErrors {
    type Item = &'a WorkloadError;
    type IntoIter = std::slice::Iter<'a, WorkloadError>;
    fn into_iter(self) -> Self::IntoIter {
        self.errors.iter()
    }
}
