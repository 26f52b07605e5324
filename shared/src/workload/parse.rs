//! Reading a workload file: the YAML tree walked document by document,
//! defaults per document, each workload's fields (its op and shape are
//! `ops.rs`'s), every problem collected with its position (`ctx.rs`).

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::checks::{check_dtype, check_name, describe, escape_controls, join_field, quote_text};
use super::{
    Workload, WorkloadErrors, DEFAULT_DTYPE, DEFAULT_TRIALS, DTYPES, MAX_TRIALS,
    MAX_WORKLOADS_PER_FILE, MAX_WORKLOAD_FILE_BYTES, MAX_YAML_DEPTH, TOP_KEYS, WORKLOAD_KEYS,
};
use crate::model::{TunerSettings, TUNER_KEYS};
use crate::target::Target;
use crate::yaml_tree::{Node, Yaml};

use super::ctx::{read_fields, Ctx, Fields};
use super::ops::parse_op;

/// A file-level default as seen by the workloads.
pub(super) enum Inherited<T> {
    Missing,
    /// Present but invalid (already reported): do not report it again per workload.
    Invalid,
    Value(T),
}

impl<T> Inherited<T> {
    fn from(result: Option<Option<T>>) -> Self {
        match result {
            None => Inherited::Missing,
            Some(None) => Inherited::Invalid,
            Some(Some(v)) => Inherited::Value(v),
        }
    }
}

pub(super) struct Defaults {
    target: Inherited<Target>,
    trials: Inherited<u32>,
    dtype: Inherited<String>,
    tuner: Inherited<TunerSettings>,
}

#[derive(Default)]
pub(super) struct FileState {
    workloads: Vec<Workload>,
    names: HashMap<String, Option<usize>>,
    count: usize,
    stop: bool,
}

/// Parses and validates a workload file (see the module docs for the format).
/// `filename` is only used in error messages. Returns every workload in file
/// order, or every problem found.
pub fn parse_workload_file(text: &str, filename: &str) -> Result<Vec<Workload>, WorkloadErrors> {
    let mut ctx = Ctx::new(filename);
    if text.len() > MAX_WORKLOAD_FILE_BYTES {
        ctx.push(
            None,
            None,
            None,
            format!(
                "the file is {} bytes; workload files may be at most {} bytes (16 MiB)",
                text.len(),
                MAX_WORKLOAD_FILE_BYTES
            ),
        );
        return ctx.finish(Vec::new());
    }
    let documents = match crate::yaml_tree::parse_documents(text, MAX_YAML_DOCUMENTS) {
        Ok(docs) => docs,
        Err(err) => {
            report_yaml_error(&mut ctx, &err);
            return ctx.finish(Vec::new());
        }
    };
    if documents.is_empty() {
        ctx.push(
            None,
            None,
            None,
            "the file is empty: expected a mapping with `workloads:` (a list of workloads)".into(),
        );
        return ctx.finish(Vec::new());
    }
    let mut state = FileState::default();
    for doc in &documents {
        if state.stop {
            break;
        }
        parse_document(&mut ctx, &mut state, doc);
    }
    ctx.finish(state.workloads)
}

/// Most `---` documents one workload file may hold.
pub(crate) const MAX_YAML_DOCUMENTS: usize = 256;

pub(super) fn report_yaml_error(ctx: &mut Ctx<'_>, err: &serde_saphyr::Error) {
    let inner = err.without_snippet();
    let (line, column) = match err.location() {
        Some(loc) => (
            usize::try_from(loc.line()).ok().filter(|l| *l > 0),
            usize::try_from(loc.column()).ok().filter(|c| *c > 0),
        ),
        None => (None, None),
    };
    if let Some(limit) = yaml_limit_message(inner) {
        ctx.push(line, column, None, format!("YAML refused: {limit}"));
        return;
    }
    let mut message = escape_controls(&default_message(inner));
    if message.trim().is_empty() {
        message = "syntax error".into();
    }
    let message = match column {
        Some(c) => format!("invalid YAML: {message} (column {c})"),
        None => format!("invalid YAML: {message}"),
    };
    ctx.push(line, column, None, message);
}

/// A readable message for the parser's resource limits (see [`crate::yaml_tree::options`]).
pub(super) fn yaml_limit_message(mut err: &serde_saphyr::Error) -> Option<String> {
    use serde_saphyr::budget::BudgetBreach as B;
    use serde_saphyr::Error as E;
    for _ in 0..8 {
        match err {
            E::AliasError { error, .. } | E::WithSnippet { error, .. } => err = error,
            _ => break,
        }
    }
    Some(match err {
        E::Budget { breach, .. } => match breach {
            B::Depth { .. } => format!("it is nested more than {MAX_YAML_DEPTH} levels deep"),
            B::Nodes { .. } | B::Events { .. } => {
                "it has too many values for one workload file; split it".into()
            }
            B::Aliases { .. }
            | B::Anchors { .. }
            | B::AliasAnchorRatio { .. }
            | B::MergeKeys { .. }
            | B::RecordedAnchorEvents { .. }
            | B::RecordedAnchorBytes { .. } => {
                "it uses too many anchors, aliases or merge keys".into()
            }
            B::Documents { .. } => "it has too many YAML documents (`---`)".into(),
            B::ScalarBytes { .. } => "its text values are too large".into(),
            other => format!("it exceeds a parser limit ({other:?})"),
        },
        E::AliasReplayLimitExceeded { .. }
        | E::AliasExpansionLimitExceeded { .. }
        | E::AliasReplayStackDepthExceeded { .. } => {
            "its aliases (`*name`) expand to too much data".into()
        }
        // The parser's own flow-nesting guard (granit-parser) has no typed error.
        other if default_message(other).contains("recursion limit exceeded") => {
            format!("it is nested more than {MAX_YAML_DEPTH} levels deep")
        }
        _ => return None,
    })
}

/// serde-saphyr's message text, without its "at line X, column Y" suffix.
pub(super) fn default_message(err: &serde_saphyr::Error) -> String {
    use serde_saphyr::MessageFormatter;
    serde_saphyr::DefaultMessageFormatter
        .format_message(err)
        .into_owned()
}

pub(super) fn parse_document(ctx: &mut Ctx<'_>, state: &mut FileState, doc: &Node) {
    let entries = match &doc.value {
        Yaml::Map(entries) => entries,
        Yaml::Seq(_) => {
            ctx.at(
                doc,
                "",
                "the top level must be a mapping with `workloads:`, got a list \
                 (put the list under `workloads:`)"
                    .into(),
            );
            return;
        }
        _ => {
            let msg = format!(
                "the top level must be a mapping with `workloads:`, got {}",
                describe(doc)
            );
            ctx.at(doc, "", msg);
            return;
        }
    };
    let fields = read_fields(ctx, entries, "", &TOP_KEYS);
    let defaults = Defaults {
        target: Inherited::from(fields.get("target").map(|n| parse_target(ctx, n, "target"))),
        trials: Inherited::from(fields.get("trials").map(|n| parse_trials(ctx, n, "trials"))),
        dtype: Inherited::from(fields.get("dtype").map(|n| parse_dtype(ctx, n, "dtype"))),
        tuner: Inherited::from(fields.get("tuner").map(|n| parse_tuner(ctx, n, "tuner"))),
    };
    let Some(list) = fields.get("workloads") else {
        if !fields.was_suggested("workloads") {
            ctx.at(
                doc,
                "workloads",
                "missing `workloads:` (the list of workloads to tune)".into(),
            );
        }
        return;
    };
    let items = match &list.value {
        Yaml::Seq(items) if !items.is_empty() => items,
        Yaml::Seq(_) | Yaml::Null => {
            ctx.at(
                list,
                "workloads",
                "is empty: list at least one workload".into(),
            );
            return;
        }
        _ => {
            let msg = format!("must be a list of workloads, got {}", describe(list));
            ctx.at(list, "workloads", msg);
            return;
        }
    };
    for (i, item) in items.iter().enumerate() {
        let path = format!("workloads[{i}]");
        if state.count >= MAX_WORKLOADS_PER_FILE {
            ctx.at(
                item,
                &path,
                format!(
                    "too many workloads: a file may hold at most {MAX_WORKLOADS_PER_FILE} \
                     (split it into several files)"
                ),
            );
            state.stop = true;
            return;
        }
        state.count += 1;
        if let Some(w) = parse_workload(ctx, state, &defaults, &path, item) {
            state.workloads.push(w);
        }
    }
}

/// One item of `workloads:` as a workload, or `None` with every problem
/// found in it reported to `ctx` (a field left out takes the file's default).
pub(super) fn parse_workload(
    ctx: &mut Ctx<'_>,
    state: &mut FileState,
    defaults: &Defaults,
    path: &str,
    item: &Node,
) -> Option<Workload> {
    let entries = workload_entries(ctx, path, item)?;
    let errors_before = ctx.count();
    let fields = read_fields(ctx, entries, path, &WORKLOAD_KEYS);
    // Read in this order, so problems are reported in it.
    let name = read_name(ctx, &fields, path, item);
    let dtype = read_dtype(ctx, &fields, defaults, path);
    let trials = read_trials(ctx, &fields, defaults, path);
    let target = read_target(ctx, &fields, defaults, path, item);
    let tuner = read_tuner(ctx, &fields, defaults, path);
    let op = parse_op(ctx, &fields, path, item);
    let name = name.and_then(|name| claim_name(ctx, state, &fields, path, item, name));
    if ctx.count() > errors_before {
        return None;
    }
    Some(Workload {
        name: name?,
        op: op?,
        dtype: dtype?,
        target: target?,
        trials: trials?,
        tuner: tuner?,
    })
}

/// The item's entries: a workload must be a mapping.
fn workload_entries<'a>(
    ctx: &mut Ctx<'_>,
    path: &str,
    item: &'a Node,
) -> Option<&'a [(Node, Node)]> {
    match &item.value {
        Yaml::Map(entries) => Some(entries),
        _ => {
            let msg = format!(
                "each workload must be a mapping with `name`, `op` and `shape` \
                 (or `tvmscript`), got {}",
                describe(item)
            );
            ctx.at(item, path, msg);
            None
        }
    }
}

/// `name:`, which has no default (a misspelling of it was already reported).
fn read_name(ctx: &mut Ctx<'_>, fields: &Fields<'_>, path: &str, item: &Node) -> Option<String> {
    let field = join_field(path, "name");
    match fields.get("name") {
        Some(node) => parse_name(ctx, node, &field),
        None => {
            if !fields.was_suggested("name") {
                ctx.at(item, &field, "missing `name`".into());
            }
            None
        }
    }
}

/// `dtype:`, else the file's, else the default; `None` when the file's is
/// invalid (already reported).
fn read_dtype(
    ctx: &mut Ctx<'_>,
    fields: &Fields<'_>,
    defaults: &Defaults,
    path: &str,
) -> Option<String> {
    match (fields.get("dtype"), &defaults.dtype) {
        (Some(node), _) => parse_dtype(ctx, node, &join_field(path, "dtype")),
        (None, Inherited::Value(d)) => Some(d.clone()),
        (None, Inherited::Missing) => Some(DEFAULT_DTYPE.to_string()),
        (None, Inherited::Invalid) => None,
    }
}

/// `trials:`, else the file's, else the default.
fn read_trials(
    ctx: &mut Ctx<'_>,
    fields: &Fields<'_>,
    defaults: &Defaults,
    path: &str,
) -> Option<u32> {
    match (fields.get("trials"), &defaults.trials) {
        (Some(node), _) => parse_trials(ctx, node, &join_field(path, "trials")),
        (None, Inherited::Value(t)) => Some(*t),
        (None, Inherited::Missing) => Some(DEFAULT_TRIALS),
        (None, Inherited::Invalid) => None,
    }
}

/// `target:`, else the file's: there is no default target, since tuning
/// for the wrong machine would waste the whole run.
fn read_target(
    ctx: &mut Ctx<'_>,
    fields: &Fields<'_>,
    defaults: &Defaults,
    path: &str,
    item: &Node,
) -> Option<Target> {
    let field = join_field(path, "target");
    match (fields.get("target"), &defaults.target) {
        (Some(node), _) => parse_target(ctx, node, &field),
        (None, Inherited::Value(t)) => Some(t.clone()),
        (None, Inherited::Invalid) => None,
        (None, Inherited::Missing) => {
            if !fields.was_suggested("target") {
                ctx.at(
                    item,
                    &field,
                    "missing `target`: give one on this workload or at the top of the file \
                     (e.g. `target: {kind: llvm, num-cores: 2}`)"
                        .into(),
                );
            }
            None
        }
    }
}

/// `tuner:` over the file's (each setting it gives replaces the file's),
/// else the file's, else the defaults.
fn read_tuner(
    ctx: &mut Ctx<'_>,
    fields: &Fields<'_>,
    defaults: &Defaults,
    path: &str,
) -> Option<TunerSettings> {
    let field = join_field(path, "tuner");
    match (fields.get("tuner"), &defaults.tuner) {
        (Some(node), Inherited::Value(base)) => {
            parse_tuner(ctx, node, &field).map(|t| t.over(base))
        }
        (Some(node), _) => parse_tuner(ctx, node, &field),
        (None, Inherited::Value(base)) => Some(base.clone()),
        (None, Inherited::Missing) => Some(TunerSettings::default()),
        (None, Inherited::Invalid) => None,
    }
}

/// The name, unless an earlier workload of the file has it. Names are
/// claimed even when the workload has other errors, so a later duplicate
/// is still reported.
fn claim_name(
    ctx: &mut Ctx<'_>,
    state: &mut FileState,
    fields: &Fields<'_>,
    path: &str,
    item: &Node,
    name: String,
) -> Option<String> {
    match state.names.get(&name) {
        Some(first) => {
            let where_ = first
                .map(|l| format!(" (first used at line {l})"))
                .unwrap_or_default();
            let node = fields.get("name").unwrap_or(item);
            ctx.at(
                node,
                &join_field(path, "name"),
                format!("duplicate name {}{where_}", quote_text(&name)),
            );
            None
        }
        None => {
            let line = fields.key_node("name").and_then(Node::line);
            state.names.insert(name.clone(), line);
            Some(name)
        }
    }
}

/// `tuner: {strategy: evolutionary, cost_model: xgb, trials_per_round: 16,
/// builder_timeout_s: 30, runner_timeout_s: 30, number: 1, repeat: 3,
/// rules: union}`.
pub(super) fn parse_tuner(ctx: &mut Ctx<'_>, node: &Node, field: &str) -> Option<TunerSettings> {
    let Yaml::Map(entries) = &node.value else {
        let msg = format!(
            "must be a mapping of tuner settings ({}), got {}",
            TUNER_KEYS.join(", "),
            describe(node)
        );
        ctx.at(node, field, msg);
        return None;
    };
    let errors_before = ctx.count();
    let fields = read_fields(ctx, entries, field, &TUNER_KEYS);
    let text = |ctx: &mut Ctx<'_>, key: &str| -> Option<String> {
        let node = fields.get(key)?;
        match node.as_str() {
            Some(s) => Some(s.trim().to_string()),
            None => {
                let msg = format!("must be a string, got {}", describe(node));
                ctx.at(node, &join_field(field, key), msg);
                None
            }
        }
    };
    let number = |ctx: &mut Ctx<'_>, key: &str| -> Option<u32> {
        let node = fields.get(key)?;
        parse_trials(ctx, node, &join_field(field, key))
    };
    let tuner = TunerSettings {
        strategy: text(ctx, "strategy"),
        cost_model: text(ctx, "cost_model"),
        trials_per_round: number(ctx, "trials_per_round"),
        builder_timeout_s: number(ctx, "builder_timeout_s"),
        runner_timeout_s: number(ctx, "runner_timeout_s"),
        number: number(ctx, "number"),
        repeat: number(ctx, "repeat"),
        rules: text(ctx, "rules"),
    };
    for (key, message) in tuner.problems() {
        let at = fields.get(key).unwrap_or(node);
        ctx.at(at, &join_field(field, key), message);
    }
    (ctx.count() == errors_before).then_some(tuner)
}

pub(super) fn parse_name(ctx: &mut Ctx<'_>, node: &Node, field: &str) -> Option<String> {
    let raw = match &node.value {
        Yaml::Str(s) => s.trim().to_string(),
        Yaml::Int(i) => i.to_string(),
        _ => {
            let msg = format!("must be a string, got {}", describe(node));
            ctx.at(node, field, msg);
            return None;
        }
    };
    match check_name(&raw) {
        Ok(()) => Some(raw),
        Err(m) => {
            ctx.at(node, field, m);
            None
        }
    }
}

pub(super) fn parse_dtype(ctx: &mut Ctx<'_>, node: &Node, field: &str) -> Option<String> {
    let Some(s) = node.as_str() else {
        let msg = format!(
            "must be a data type such as float32 (supported: {}), got {}",
            DTYPES.join(", "),
            describe(node)
        );
        ctx.at(node, field, msg);
        return None;
    };
    let s = s.trim();
    match check_dtype(s) {
        Ok(()) => Some(s.to_string()),
        Err(m) => {
            ctx.at(node, field, m);
            None
        }
    }
}

pub(super) fn parse_trials(ctx: &mut Ctx<'_>, node: &Node, field: &str) -> Option<u32> {
    match &node.value {
        Yaml::Int(v) if (1..=i128::from(MAX_TRIALS)).contains(v) => u32::try_from(*v).ok(),
        Yaml::Int(v) if *v > i128::from(MAX_TRIALS) => {
            ctx.at(
                node,
                field,
                format!("must be at most {MAX_TRIALS}, got {v}"),
            );
            None
        }
        _ => {
            let msg = format!("must be a positive integer, got {}", describe(node));
            ctx.at(node, field, msg);
            None
        }
    }
}

pub(super) fn parse_target(ctx: &mut Ctx<'_>, node: &Node, field: &str) -> Option<Target> {
    let result = match &node.value {
        Yaml::Str(s) => Target::parse(s).map_err(|e| format!("invalid target: {e}")),
        Yaml::Map(_) => match yaml_to_json(node) {
            Ok(Value::Object(map)) => {
                Target::try_from(map).map_err(|e| format!("invalid target: {e}"))
            }
            Ok(_) => Err("invalid target: expected a mapping".into()),
            Err(m) => Err(format!("invalid target: {m}")),
        },
        _ => Err(format!(
            "must be a mapping like {{kind: llvm, num-cores: 2}} or a TVM target string like \
             \"llvm -num-cores=2\", got {}",
            describe(node)
        )),
    };
    match result {
        Ok(t) => Some(t),
        Err(m) => {
            ctx.at(node, field, m);
            None
        }
    }
}

pub(super) fn yaml_to_json(node: &Node) -> Result<Value, String> {
    Ok(match &node.value {
        Yaml::Null => Value::Null,
        Yaml::Bool(b) => Value::Bool(*b),
        Yaml::Int(i) => {
            if let Ok(v) = i64::try_from(*i) {
                Value::from(v)
            } else if let Ok(v) = u64::try_from(*i) {
                Value::from(v)
            } else {
                return Err(format!("the number {i} is too large"));
            }
        }
        Yaml::Float(x) => serde_json::Number::from_f64(*x)
            .map(Value::Number)
            .ok_or_else(|| format!("{x} is not a finite number"))?,
        Yaml::Str(s) => Value::String(s.clone()),
        Yaml::Seq(items) => Value::Array(items.iter().map(yaml_to_json).collect::<Result<_, _>>()?),
        Yaml::Map(entries) => {
            let mut map = Map::new();
            for (k, v) in entries {
                let Some(key) = k.as_str() else {
                    return Err(format!("keys must be strings, got {}", describe(k)));
                };
                map.insert(key.to_string(), yaml_to_json(v)?);
            }
            Value::Object(map)
        }
    })
}
