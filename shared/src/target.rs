//! Compilation targets and the rule that decides which worker may run which job.
//!
//! TVM 0.27 describes a target as a JSON dict (`{"kind": "llvm", "num-cores": 2}`).
//! We keep that form on the wire and in the database, so what a user writes is
//! what TVM receives. The old CLI string form (`llvm -mcpu=skylake -num-cores=4`)
//! is still what many Lorien files and scripts contain, so it is converted here,
//! once, at the edge.
//!
//! # Matching rule
//! A worker can serve a job when the `kind`s are equal and every other attribute
//! the *job* pins has the same value in the worker's target. Attributes the job
//! leaves out are free: a job for `{"kind":"llvm"}` runs on any llvm worker, a job
//! for `{"kind":"llvm","mcpu":"znver5"}` only on workers that say `"mcpu":"znver5"`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

/// A TVM target as a JSON object with at least a string `kind`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[serde(try_from = "Map<String, Value>")]
pub struct Target(Map<String, Value>);

/// Written as its map, borrowed: `#[serde(into = ...)]` cloned the whole map
/// each time a job view, row or message carrying a target was written
/// (~2% of the master's CPU in the fleet bench).
impl Serialize for Target {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TargetError {
    #[error("target must have a string field `kind` (e.g. {{\"kind\": \"llvm\"}})")]
    MissingKind,
    #[error("target is empty")]
    Empty,
    #[error("target `{0}` is neither a JSON object nor a TVM target string: {1}")]
    Unparseable(String, String),
}

/// A JSON object with a non-empty string `kind` and any other TVM target
/// attributes.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for Target {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Target".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A TVM target as a JSON object: a string `kind` plus any TVM target attributes (e.g. {\"kind\": \"llvm\", \"num-cores\": 2}).",
            "type": "object",
            "properties": {"kind": {"type": "string", "minLength": 1}},
            "required": ["kind"],
            "additionalProperties": true
        })
    }
}

impl TryFrom<Map<String, Value>> for Target {
    type Error = TargetError;
    fn try_from(map: Map<String, Value>) -> Result<Self, TargetError> {
        match map.get("kind") {
            Some(Value::String(kind)) if !kind.trim().is_empty() => Ok(Target(map)),
            _ => Err(TargetError::MissingKind),
        }
    }
}

impl Target {
    /// `{"kind": kind}` with no other attribute.
    pub fn of_kind(kind: &str) -> Self {
        let mut map = Map::new();
        map.insert("kind".into(), Value::String(kind.into()));
        Target(map)
    }

    pub fn kind(&self) -> &str {
        self.0.get("kind").and_then(Value::as_str).unwrap_or("")
    }

    pub fn attrs(&self) -> &Map<String, Value> {
        &self.0
    }

    /// Parses either the JSON dict form or the legacy TVM CLI string form.
    pub fn parse(text: &str) -> Result<Self, TargetError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(TargetError::Empty);
        }
        if text.starts_with('{') {
            let map: Map<String, Value> = serde_json::from_str(text)
                .map_err(|e| TargetError::Unparseable(text.into(), e.to_string()))?;
            return Target::try_from(map);
        }
        Self::from_cli_string(text)
    }

    /// Converts `llvm -mcpu=skylake -num-cores=4 -keys=cpu,x86` into
    /// `{"kind":"llvm","mcpu":"skylake","num-cores":4,"keys":["cpu","x86"]}`.
    pub fn from_cli_string(text: &str) -> Result<Self, TargetError> {
        let mut tokens = text.split_whitespace().peekable();
        let kind = tokens.next().ok_or(TargetError::Empty)?;
        if kind.starts_with('-') || kind.contains('=') {
            return Err(TargetError::Unparseable(
                text.into(),
                "the first word must be the target kind (e.g. llvm, cuda)".into(),
            ));
        }
        let mut map = Map::new();
        map.insert("kind".into(), Value::String(kind.into()));
        while let Some(token) = tokens.next() {
            let Some(flag) = token.strip_prefix('-') else {
                return Err(TargetError::Unparseable(
                    text.into(),
                    format!("`{token}` is not an option (options look like -key=value)"),
                ));
            };
            let flag = flag.trim_start_matches('-');
            let (key, raw) = match flag.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => match tokens.peek() {
                    Some(next) if !next.starts_with('-') => {
                        let v = next.to_string();
                        tokens.next();
                        (flag.to_string(), v)
                    }
                    _ => (flag.to_string(), "true".to_string()),
                },
            };
            if key.is_empty() {
                return Err(TargetError::Unparseable(
                    text.into(),
                    "empty option name".into(),
                ));
            }
            // Found by fuzzing: `llvm -kind` replaced the kind with `true`.
            if key == "kind" {
                return Err(TargetError::Unparseable(
                    text.into(),
                    "`-kind` is not an option: the kind is the first word".into(),
                ));
            }
            map.insert(key.clone(), cli_value(&key, &raw));
        }
        Ok(Target(map))
    }

    /// The matching rule (see module docs): can a worker with `self` run `job`?
    pub fn serves(&self, job: &Target) -> bool {
        self.kind() == job.kind()
            && job
                .0
                .iter()
                .filter(|(k, _)| k.as_str() != "kind")
                .all(|(k, v)| self.0.get(k) == Some(v))
    }

    /// The effective target of a job run by a worker with target `worker`:
    /// every attribute the job leaves open is filled from the worker's own
    /// (`{"kind":"llvm"}` on a `{"kind":"llvm","mcpu":"znver3","num-cores":2}`
    /// worker tunes for znver3 on 2 cores). What the job pins wins.
    pub fn completed_by(&self, worker: &Target) -> Target {
        let mut map = self.0.clone();
        if worker.kind() == self.kind() {
            for (k, v) in &worker.0 {
                map.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        Target(map)
    }

    /// Canonical JSON text (keys sorted), used in job identities.
    pub fn canonical_json(&self) -> String {
        // serde_json's default Map is a BTreeMap, so serialisation is sorted.
        serde_json::to_string(&self.0).unwrap_or_default()
    }
}

fn cli_value(key: &str, raw: &str) -> Value {
    if key == "keys" || key == "libs" || key == "mattr" {
        return Value::Array(
            raw.split(',')
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.into()))
                .collect(),
        );
    }
    if let Ok(n) = raw.parse::<i64>() {
        return Value::from(n);
    }
    match raw {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => Value::String(raw.into()),
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical_json())
    }
}

#[cfg(test)]
mod tests;
