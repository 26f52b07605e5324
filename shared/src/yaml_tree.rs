//! A YAML tree that remembers where every value came from.
//!
//! Both YAML readers (the workload format and the Lorien importer) need the
//! line and column of any value to report errors as `file:line: field: ...`,
//! and neither may trust the input. serde-saphyr's `Spanned` gives positions;
//! this module turns a document into plain data with those positions, under
//! one set of parser limits.

use crate::workload::{MAX_WORKLOAD_FILE_BYTES, MAX_YAML_DEPTH};
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;

mod fast;
#[cfg(test)]
mod tests;

/// A YAML node and where it starts (1-based line and column; 0 when unknown).
#[derive(Debug, PartialEq)]
pub(crate) struct Node {
    pub(crate) value: Yaml,
    pub(crate) line: usize,
    pub(crate) column: usize,
}

#[derive(Debug, PartialEq)]
pub(crate) enum Yaml {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = serde_saphyr::Spanned::<Yaml>::deserialize(deserializer)?;
        let loc = spanned.referenced;
        Ok(Node {
            value: spanned.value,
            line: usize::try_from(loc.line()).unwrap_or(0),
            column: usize::try_from(loc.column()).unwrap_or(0),
        })
    }
}

impl<'de> Deserialize<'de> for Yaml {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(YamlVisitor)
    }
}

struct YamlVisitor;

impl<'de> Visitor<'de> for YamlVisitor {
    type Value = Yaml;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Yaml, E> {
        Ok(Yaml::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Yaml, E> {
        Ok(Yaml::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Yaml, E> {
        Ok(Yaml::Int(v.into()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Yaml, E> {
        Ok(Yaml::Int(v))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Yaml, E> {
        Ok(Yaml::Int(i128::try_from(v).unwrap_or(i128::MAX)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Yaml, E> {
        Ok(Yaml::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Yaml, E> {
        Ok(Yaml::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Yaml, E> {
        Ok(Yaml::Str(v))
    }
    fn visit_bytes<E>(self, v: &[u8]) -> Result<Yaml, E> {
        Ok(Yaml::Str(String::from_utf8_lossy(v).into_owned()))
    }
    fn visit_unit<E>(self) -> Result<Yaml, E> {
        Ok(Yaml::Null)
    }
    fn visit_none<E>(self) -> Result<Yaml, E> {
        Ok(Yaml::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Yaml, D::Error> {
        d.deserialize_any(YamlVisitor)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Yaml, D::Error> {
        d.deserialize_any(YamlVisitor)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Yaml, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Yaml::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Yaml, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Node>()? {
            let value = map.next_value::<Node>()?;
            entries.push((key, value));
        }
        Ok(Yaml::Map(entries))
    }
}

impl Node {
    pub(crate) fn line(&self) -> Option<usize> {
        (self.line > 0).then_some(self.line)
    }
    pub(crate) fn column(&self) -> Option<usize> {
        (self.column > 0).then_some(self.column)
    }
    pub(crate) fn as_str(&self) -> Option<&str> {
        match &self.value {
            Yaml::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Every document of `text` as a tree, under [`options`]. A plain file (no
/// anchors, tags or unusual numbers: what people write and what tools
/// generate) is read by [`fast`] straight from the parser's events; anything
/// else, and every error, goes through serde-saphyr, so what is accepted,
/// the trees and the error texts are serde-saphyr's either way.
pub(crate) fn parse_documents(
    text: &str,
    max_documents: usize,
) -> Result<Vec<Node>, serde_saphyr::Error> {
    if let Some(documents) = fast::documents(text, &budget(max_documents)) {
        return Ok(documents);
    }
    serde_saphyr::from_multiple_with_options::<Node>(text, options(max_documents))
}

/// For the tests and the fuzzer: whether the fast path answered for `text`
/// (`Ok(false)`: it declined), and `Err` with both answers when it answered
/// differently from serde-saphyr, which it must never do.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn fast_path_agrees(text: &str, max_documents: usize) -> Result<bool, String> {
    let Some(fast) = fast::documents(text, &budget(max_documents)) else {
        return Ok(false);
    };
    match serde_saphyr::from_multiple_with_options::<Node>(text, options(max_documents)) {
        Ok(slow) if slow == fast => Ok(true),
        slow => Err(format!(
            "the YAML readers disagree on {text:?}:\nfast path: {fast:?}\nserde-saphyr: {slow:?}"
        )),
    }
}

/// Parser limits shared by every YAML reader: deep nesting, alias bombs and
/// huge inputs fail fast with a clear error instead of exhausting memory.
pub(crate) fn options(max_documents: usize) -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: Some(budget(max_documents)),
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: 200_000,
            max_replay_stack_depth: 16,
        },
        // `n`, `y`, `no`, `on` ... stay strings: `n` is a matmul dimension.
        strict_booleans: true,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::AsString,
        with_snippet: false,
        crop_radius: 0,
    }
}

fn budget(max_documents: usize) -> serde_saphyr::Budget {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_YAML_DEPTH;
    budget.flow_nesting_limit = MAX_YAML_DEPTH;
    budget.max_nodes = 600_000;
    budget.max_events = 1_500_000;
    budget.max_documents = max_documents;
    budget.max_total_scalar_bytes = MAX_WORKLOAD_FILE_BYTES;
    budget.max_aliases = 10_000;
    budget.max_anchors = 10_000;
    budget.max_merge_keys = 10_000;
    budget.max_recorded_anchor_events = 200_000;
    budget.max_recorded_anchor_bytes = MAX_WORKLOAD_FILE_BYTES;
    budget
}
