//! Located diagnostics for YAML input: every problem collected with its
//! file, line and field, reported in file order ([`Ctx`]); and one mapping's
//! keys checked against the allowed ones, with a "did you mean" for a
//! near miss ([`read_fields`]). Shared by every reader of YAML input.

use super::checks::{describe, did_you_mean, join_field, key_for_path, quote_text, suggest};
use super::{WorkloadError, WorkloadErrors, MAX_REPORTED_ERRORS};
use crate::yaml_tree::Node;

/// Collects located errors for one file, up to [`MAX_REPORTED_ERRORS`], and
/// reports them in file order. Shared by every reader of YAML input.
pub(crate) struct Ctx<'f> {
    file: &'f str,
    errors: Vec<WorkloadError>,
    dropped: usize,
}

impl<'f> Ctx<'f> {
    pub(crate) fn new(file: &'f str) -> Self {
        Ctx {
            file,
            errors: Vec::new(),
            dropped: 0,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.errors.is_empty() && self.dropped == 0
    }

    pub(crate) fn push(
        &mut self,
        line: Option<usize>,
        column: Option<usize>,
        field: Option<String>,
        message: String,
    ) {
        if self.errors.len() >= MAX_REPORTED_ERRORS {
            self.dropped += 1;
            return;
        }
        self.errors.push(WorkloadError {
            file: self.file.to_string(),
            line,
            column,
            field,
            message,
        });
    }

    /// An error located at `node`.
    pub(crate) fn at(&mut self, node: &Node, field: &str, message: String) {
        let field = (!field.is_empty()).then(|| field.to_string());
        self.push(node.line(), node.column(), field, message);
    }

    pub(super) fn count(&self) -> usize {
        self.errors.len() + self.dropped
    }

    pub(crate) fn finish<T>(mut self, value: T) -> Result<T, WorkloadErrors> {
        if self.is_empty() {
            return Ok(value);
        }
        // Report in file order (checks run field by field, not line by line).
        self.errors
            .sort_by_key(|e| (e.line.unwrap_or(usize::MAX), e.column.unwrap_or(0)));
        if self.dropped > 0 {
            self.errors.push(WorkloadError {
                file: self.file.to_string(),
                line: None,
                column: None,
                field: None,
                message: format!(
                    "{} more error(s) not shown (only the first {MAX_REPORTED_ERRORS} are reported)",
                    self.dropped
                ),
            });
        }
        Err(WorkloadErrors {
            errors: self.errors,
        })
    }
}

/// The known keys of one mapping, after unknown keys were reported.
pub(super) struct Fields<'a> {
    known: Vec<(&'static str, &'a Node, &'a Node)>,
    /// Known keys that an unknown key looked like (so "missing" is not reported too).
    suggested: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    pub(super) fn get(&self, key: &str) -> Option<&'a Node> {
        self.known
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, _, v)| *v)
    }

    pub(super) fn key_node(&self, key: &str) -> Option<&'a Node> {
        self.known
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, k, _)| *k)
    }

    pub(super) fn was_suggested(&self, key: &str) -> bool {
        self.suggested.contains(&key)
    }
}

pub(super) fn read_fields<'a>(
    ctx: &mut Ctx<'_>,
    entries: &'a [(Node, Node)],
    path: &str,
    allowed: &[&'static str],
) -> Fields<'a> {
    let mut fields = Fields {
        known: Vec::new(),
        suggested: Vec::new(),
    };
    for (key_node, value) in entries {
        let Some(key) = key_node.as_str() else {
            let msg = format!("keys must be strings, got {}", describe(key_node));
            ctx.at(key_node, path, msg);
            continue;
        };
        if let Some(&known) = allowed.iter().find(|a| **a == key) {
            if fields.known.iter().any(|(k, _, _)| *k == known) {
                ctx.at(key_node, &join_field(path, known), "duplicate key".into());
            } else {
                fields.known.push((known, key_node, value));
            }
            continue;
        }
        if let Some(s) = suggest(key, allowed) {
            fields.suggested.push(s);
        }
        let hint = did_you_mean(key, allowed);
        ctx.at(
            key_node,
            &join_field(path, &key_for_path(key)),
            format!(
                "unknown key {}{hint} (expected one of: {})",
                quote_text(key),
                allowed.join(", ")
            ),
        );
    }
    fields
}
