//! Importing Lorien workload files (awslabs/lorien, the Python farm tunefleet
//! replaces) into our workload format.
//!
//! # The Lorien format
//!
//! A YAML mapping whose `workload` key is a list of strings, each an AutoTVM
//! task dumped by ruamel.yaml as a Python-tagged flow mapping:
//!
//! ```yaml
//! workload:
//! - '!!python/object:lorien.dialect.tvm_dial.autotvm_dial.workload.AutoTVMWorkload {_primary_key: null, args: [[TENSOR, [1, 64, 56, 56], float32], [TENSOR, [64, 64, 3, 3], float32], [1, 1], [1, 1, 1, 1], [1, 1], NCHW, NCHW, float32], target: llvm -keys=cpu -link-params=0, task_name: conv2d_NCHWc.x86}'
//! ```
//!
//! Older files use the class `lorien.workload.Workload` and carry `lib: topi`.
//!
//! **The tag is never evaluated.** The string is only text to us: the
//! `!!python/object:CLASS` prefix is checked against [`LORIEN_CLASSES`] and
//! stripped, and the `{...}` after it is parsed as a plain YAML flow mapping
//! (data only). Any other tag (`!!python/object/apply:os.system`, `!!python/name:`,
//! another class) is reported as an error. Other top-level keys (Lorien merges
//! several `@config.yaml` files, so a file may also hold `tuner:`, `ntrial:` ...)
//! are ignored; inside a workload, keys starting with `_` (`_primary_key`) are
//! ignored and `lib` must be `topi`.
//!
//! # Mapping of AutoTVM tasks onto our ops
//!
//! Argument orders are those of the TOPI compute functions registered under
//! these task names (`python/tvm/topi/x86/*.py`); Lorien stores `task.args`
//! with tuples turned into lists and tensors as `[TENSOR, shape, dtype]`.
//!
//! | task names | args | our op and shape |
//! |---|---|---|
//! | `conv2d_NCHWc.x86`, `conv2d_nchw.x86`, `conv2d_nchw` | data `[N,C,H,W]`, kernel `[O,C,KH,KW]`, strides, padding, dilation, (layout, out_layout,) out_dtype | `conv2d_nchw`: batch N, in_channels C, height H, width W, out_channels O, kernel `[KH,KW]` |
//! | `depthwise_conv2d_NCHWc.x86`, `depthwise_conv2d_nchw.x86` | data `[N,C,H,W]`, kernel `[C,M,KH,KW]`, strides, padding, dilation, (layout, out_layout,) out_dtype | `depthwise_conv2d_nchw`: batch N, channels C, height H, width W, multiplier M, kernel `[KH,KW]` |
//! | `dense_nopack.x86`, `dense_pack.x86` | data `[M,K]`, weight `[N,K]`, bias, out_dtype | `dense`: batch M, in_features K, out_features N |
//! | `batch_matmul.x86` | A, B, out_shape, out_dtype, transpose_a (false), transpose_b (true) | `batch_matmul`: batch, m, n, k |
//!
//! Details:
//! - Convolutions take 6 arguments (no layouts) or 8 (with layouts); only 4-D
//!   tensors and the data layout `NCHW` are read (that is what Lorien extracts for
//!   x86: the NCHWc packing happens inside the task). The kernel's input channels
//!   must equal the data's (grouped convolutions are other tasks). `strides` and
//!   `dilation` are one integer or `[h, w]`; `padding` is one integer, `[h, w]` or
//!   `[top, left, bottom, right]`, which must be symmetric (top = bottom and
//!   left = right) because our format only has symmetric padding.
//! - The depthwise kernel is `[C, multiplier, KH, KW]` as in TOPI
//!   (`depthwise_conv2d_NCHWc` packs it with `oc = filters * cm`), so its first
//!   dimension must equal the data's channels.
//! - The dense bias is not part of our op and is ignored (it is an epilogue; the
//!   tuned kernel is the matrix product).
//! - `batch_matmul.x86` is NT by default: A `[B, M, K]`, B `[B, N, K]`;
//!   `transpose_a`/`transpose_b` (when given) are honoured to read M, N and K.
//!   Our `batch_matmul` op uses the same NT layout as TVM's `nn.batch_matmul`
//!   (`C[b,m,n] = Σ A[b,m,k] · B[b,n,k]`), so the default case tunes the very
//!   kernel Lorien tuned; for explicit `transpose_*` flags only the shape is
//!   carried over. Batch broadcasting (one side with batch 1) is not supported.
//! - The dtype is the data tensor's; the weight must have the same dtype. The
//!   `out_dtype` argument is not part of our format and is ignored (the worker
//!   picks the accumulation type from the dtype).
//! - The `target` string converts with [`Target::parse`].
//! - Names are built from task and shape: `conv2d_1x64x56x56_64x3x3_s1_p1`
//!   (data, then out-channels x kernel, stride, padding, `_dN` for dilation other
//!   than 1), `depthwise_conv2d_1x32x112x112_m1_3x3_s1_p1`, `dense_1x9216_4096`
//!   (data M x K, then N), `batch_matmul_12x128x64_128` (batch x M x K, then N),
//!   with `_DTYPE` appended when it is not float32. A pair with two different
//!   values is written `2x1`. Names repeated in one file get `-2`, `-3`, ...
//!   Names do not take part in job ids.
//!
//! Every other task name is an error naming the line, e.g.
//! `lorien.yaml:5: workload[3]: unknown Lorien task name "conv2d_winograd.x86" (supported: ...)`.
//!
//! # Errors
//!
//! Like [`crate::workload::parse_workload_file`], every problem is reported at
//! once as [`WorkloadErrors`] (at most [`MAX_REPORTED_ERRORS`](crate::workload::MAX_REPORTED_ERRORS), then a count),
//! each with the file name, the line of the offending list item and a field
//! path: `workload[3]` for the item, `workload[3].args[3]` for one argument.
//! The same resource limits apply (file size, workload count, YAML budget), and
//! nothing here panics or does I/O: this module is compiled to wasm32 too.
//!
//! # Code
//!
//! Here: detection, the import loop and the YAML reading. A task's `args`
//! are read in `args.rs`; `write.rs` writes our workload format.

use crate::target::Target;
use crate::workload::{escape_controls, path_key, quote_at_most, Ctx as Errors};
use crate::workload::{
    Op, Workload, WorkloadErrors, MAX_TRIALS, MAX_WORKLOADS_PER_FILE, MAX_WORKLOAD_FILE_BYTES,
    MAX_YAML_DEPTH,
};
use crate::yaml_tree::{Node, Yaml};
use std::collections::HashSet;

mod args;
#[cfg(test)]
mod tests;
mod write;

use args::Args;
pub use write::{to_tunefleet_yaml, to_tunefleet_yaml_from};

/// The tag every Lorien workload string starts with.
pub const TAG_PREFIX: &str = "!!python/object:";

/// The Python classes whose dumps are read (the tag's class name).
pub const LORIEN_CLASSES: [&str; 2] = [
    "lorien.dialect.tvm_dial.autotvm_dial.workload.AutoTVMWorkload",
    "lorien.workload.Workload",
];

/// Every AutoTVM task name that converts, in the order error messages list them.
pub const LORIEN_TASKS: [&str; 8] = [
    "conv2d_NCHWc.x86",
    "conv2d_nchw.x86",
    "conv2d_nchw",
    "depthwise_conv2d_NCHWc.x86",
    "depthwise_conv2d_nchw.x86",
    "dense_nopack.x86",
    "dense_pack.x86",
    "batch_matmul.x86",
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum TaskKind {
    Conv2d,
    Depthwise,
    Dense,
    BatchMatmul,
}

fn task_kind(name: &str) -> Option<TaskKind> {
    Some(match name {
        "conv2d_NCHWc.x86" | "conv2d_nchw.x86" | "conv2d_nchw" => TaskKind::Conv2d,
        "depthwise_conv2d_NCHWc.x86" | "depthwise_conv2d_nchw.x86" => TaskKind::Depthwise,
        "dense_nopack.x86" | "dense_pack.x86" => TaskKind::Dense,
        "batch_matmul.x86" => TaskKind::BatchMatmul,
        _ => return None,
    })
}

// ---------------------------------------------------------------------------
// Detection
// ---------------------------------------------------------------------------

/// Does `text` look like a Lorien workload file? True when the top level is a
/// mapping with a `workload` key holding a list in which some item is a string
/// starting with `!!python/object` (so a file with one bad item is still
/// recognised, and then reported by [`import_lorien`]). Files that are not
/// valid YAML, and `workload` lists whose items carry the tag outside a string
/// (the YAML parser drops tags), are judged by their lines instead (`workload:`
/// at the start of a line and a list item starting with the tag). Never true
/// for our own format, whose list is `workloads`.
pub fn is_lorien_file(text: &str) -> bool {
    if text.len() > MAX_WORKLOAD_FILE_BYTES || !text.contains("!!python/object") {
        return false;
    }
    match serde_saphyr::from_str_with_options::<Node>(text, yaml_options()) {
        Ok(doc) => workload_list(&doc).is_some_and(|items| {
            items.iter().any(|item| {
                item.as_str()
                    .is_some_and(|s| s.trim_start().starts_with("!!python/object"))
            }) || looks_like_lorien(text)
        }),
        Err(_) => looks_like_lorien(text),
    }
}

/// The `workload` list of a parsed top level, if there is one.
fn workload_list(doc: &Node) -> Option<&[Node]> {
    let Yaml::Map(entries) = &doc.value else {
        return None;
    };
    let (_, list) = entries
        .iter()
        .find(|(k, _)| k.as_str() == Some("workload"))?;
    match &list.value {
        Yaml::Seq(items) => Some(items),
        _ => None,
    }
}

/// The line-based guess used for files that do not parse as YAML.
fn looks_like_lorien(text: &str) -> bool {
    let tagged = |s: &str| {
        s.trim_start()
            .trim_start_matches(['\'', '"'])
            .starts_with("!!python/object")
    };
    let mut key = false;
    let mut item = false;
    for line in text.lines() {
        let line = line.trim_start_matches('\u{feff}');
        if let Some(rest) = line.strip_prefix("workload") {
            if let Some(value) = rest.trim_start().strip_prefix(':') {
                key = true;
                item |= value.trim_start().strip_prefix('[').is_some_and(tagged);
            }
        }
        if let Some(rest) = line.trim_start().strip_prefix('-') {
            item |= tagged(rest);
        }
        if key && item {
            return true;
        }
    }
    false
}

// ---------------------------------------------------------------------------
// Import
// ---------------------------------------------------------------------------

/// Converts a Lorien workload file into our workloads (file order, names made
/// unique), each with `trials` trials. `filename` is only used in error
/// messages. Every problem is reported at once, located at the line of the
/// offending list item.
pub fn import_lorien(
    text: &str,
    filename: &str,
    trials: u32,
) -> Result<Vec<Workload>, WorkloadErrors> {
    let mut errs = Errors::new(filename);
    if !(1..=MAX_TRIALS).contains(&trials) {
        errs.push(
            None,
            None,
            Some("trials".into()),
            format!("must be between 1 and {MAX_TRIALS}, got {trials}"),
        );
        return errs.finish(Vec::new());
    }
    if text.len() > MAX_WORKLOAD_FILE_BYTES {
        errs.push(
            None,
            None,
            None,
            format!(
                "the file is {} bytes; workload files may be at most {MAX_WORKLOAD_FILE_BYTES} \
                 bytes (16 MiB)",
                text.len()
            ),
        );
        return errs.finish(Vec::new());
    }
    let doc = match serde_saphyr::from_str_with_options::<Node>(text, yaml_options()) {
        Ok(doc) => doc,
        Err(err) => {
            let (line, column) = error_location(&err);
            let message = match yaml_error_message(&err) {
                YamlProblem::Limit(m) => format!("YAML refused: {m}"),
                YamlProblem::Syntax(m) => format!("invalid YAML: {m}"),
            };
            errs.push(line, column, None, message);
            return errs.finish(Vec::new());
        }
    };
    let Some(list) = top_level_list(&mut errs, &doc) else {
        return errs.finish(Vec::new());
    };

    let mut converted: Vec<(Workload, String)> = Vec::new();
    for (i, item) in list.iter().enumerate() {
        let path = format!("workload[{i}]");
        if i >= MAX_WORKLOADS_PER_FILE {
            errs.at(
                item,
                &path,
                format!(
                    "too many workloads: a file may hold at most {MAX_WORKLOADS_PER_FILE} \
                     (split it into several files)"
                ),
            );
            break;
        }
        match convert_item(item, trials) {
            Ok(pair) => converted.push(pair),
            Err(problems) => {
                for p in problems {
                    let field = if p.field.is_empty() {
                        path.clone()
                    } else {
                        format!("{path}.{}", p.field)
                    };
                    errs.at(item, &field, p.message);
                }
            }
        }
    }
    if !errs.is_empty() {
        return errs.finish(Vec::new());
    }

    // Unique names: the first keeps the base name, repeats get -2, -3, ...
    let mut used: HashSet<String> = HashSet::new();
    let mut workloads = Vec::with_capacity(converted.len());
    for (mut w, base) in converted {
        let mut name = base.clone();
        let mut n = 2usize;
        while used.contains(&name) {
            name = format!("{base}-{n}");
            n += 1;
        }
        used.insert(name.clone());
        w.name = name;
        workloads.push(w);
    }
    errs.finish(workloads)
}

/// The `workload` list, or an error saying why the file is not a Lorien file.
fn top_level_list<'a>(errs: &mut Errors<'_>, doc: &'a Node) -> Option<&'a [Node]> {
    const EXPECTED: &str =
        "expected a Lorien workload file: a mapping with `workload:`, a list of \
                            '!!python/object:...Workload {...}' strings";
    let Yaml::Map(entries) = &doc.value else {
        let msg = format!("{EXPECTED}; got {}", describe(doc));
        errs.at(doc, "", msg);
        return None;
    };
    let Some((key, list)) = entries.iter().find(|(k, _)| k.as_str() == Some("workload")) else {
        let ours = entries.iter().any(|(k, _)| k.as_str() == Some("workloads"));
        let hint = if ours {
            " (this looks like a tunefleet workload file already: submit it as it is)"
        } else {
            ""
        };
        errs.at(
            doc,
            "workload",
            format!("missing `workload:`{hint}; {EXPECTED}"),
        );
        return None;
    };
    match &list.value {
        Yaml::Seq(items) if !items.is_empty() => Some(items),
        Yaml::Seq(_) | Yaml::Null => {
            errs.at(
                key,
                "workload",
                "is empty: the file lists no workloads".into(),
            );
            None
        }
        _ => {
            let msg = format!("must be a list of workload strings, got {}", describe(list));
            errs.at(list, "workload", msg);
            None
        }
    }
}

/// One problem with one list item; `field` is relative to `workload[i]`.
struct Problem {
    field: String,
    message: String,
}

fn problem(field: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem {
        field: field.into(),
        message: message.into(),
    }
}

/// Converts one list item into a workload (named with its base name, which is
/// also returned) or every problem found in it.
fn convert_item(item: &Node, trials: u32) -> Result<(Workload, String), Vec<Problem>> {
    let mapping = item_mapping(item)?;
    let entries = mapping_entries(&mapping)?;
    let mut problems = Vec::new();
    let keys = read_keys(entries, &mut problems);
    // Problems are reported in this order: keys, target, task name, args.
    let target = read_target(keys.target, &mut problems);
    let kind = read_task(keys.task, &mut problems);
    let args = read_args(keys.args, &mut problems);
    let converted = match (kind, args) {
        (Some(kind), Some(args)) => convert_args(kind, args, &mut problems),
        _ => None,
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    let (Some((op, dtype, base)), Some(target)) = (converted, target) else {
        return Err(vec![problem("", "cannot convert this workload")]);
    };
    let workload = Workload {
        name: base.clone(),
        op,
        dtype,
        target,
        trials,
        tuner: Default::default(),
    };
    validated(&workload)?;
    Ok((workload, base))
}

/// The item's string, its tag stripped and the rest read as YAML: the one
/// problem that stops reading it, if any (nothing more can be said about
/// an item whose mapping cannot be read).
fn item_mapping(item: &Node) -> Result<Node, Vec<Problem>> {
    let Some(text) = item.as_str() else {
        return Err(vec![problem(
            "",
            format!(
                "expected a quoted string '{TAG_PREFIX}{} {{...}}', got {}",
                LORIEN_CLASSES[0],
                describe(item)
            ),
        )]);
    };
    let body = strip_tag(text).map_err(|m| vec![problem("", m)])?;
    match serde_saphyr::from_str_with_options::<Node>(body, yaml_options()) {
        Ok(node) => Ok(node),
        Err(err) => {
            let column = error_location(&err).1;
            let (YamlProblem::Limit(m) | YamlProblem::Syntax(m)) = yaml_error_message(&err);
            let at = column
                .map(|c| format!(" (at character {c} of the mapping)"))
                .unwrap_or_default();
            Err(vec![problem(
                "",
                format!("invalid workload mapping after the tag: {m}{at}"),
            )])
        }
    }
}

/// The entries of the text after the tag, which must be a `{...}` mapping.
fn mapping_entries(mapping: &Node) -> Result<&[(Node, Node)], Vec<Problem>> {
    match &mapping.value {
        Yaml::Map(entries) => Ok(entries),
        _ => Err(vec![problem(
            "",
            format!(
                "expected a `{{...}}` mapping after the tag, got {}",
                describe(mapping)
            ),
        )]),
    }
}

/// The values of the keys a Lorien workload has (each `None` when absent).
struct ItemKeys<'a> {
    task: Option<&'a Node>,
    args: Option<&'a Node>,
    target: Option<&'a Node>,
}

/// Sorts the mapping's keys: the three that carry the workload are kept,
/// `lib` must say `topi`, keys starting with `_` are ignored, and every
/// other key is a problem (so a misspelt key is never silently dropped).
fn read_keys<'a>(entries: &'a [(Node, Node)], problems: &mut Vec<Problem>) -> ItemKeys<'a> {
    let mut keys = ItemKeys {
        task: None,
        args: None,
        target: None,
    };
    for (key, value) in entries {
        let Some(k) = key.as_str() else {
            problems.push(problem(
                "",
                format!("keys must be strings, got {}", describe(key)),
            ));
            continue;
        };
        match k {
            "task_name" => keys.task = Some(value),
            "args" => keys.args = Some(value),
            "target" => keys.target = Some(value),
            "lib" => {
                if value.as_str() != Some("topi") {
                    problems.push(problem(
                        "lib",
                        format!(
                            "only TOPI workloads (`lib: topi`) are supported, got {}",
                            describe(value)
                        ),
                    ));
                }
            }
            k if k.starts_with('_') => {}
            other => problems.push(problem(
                field_key(other),
                format!(
                    "unknown key {} (a Lorien workload has task_name, args, target and, in old \
                     files, lib)",
                    quote(other)
                ),
            )),
        }
    }
    keys
}

/// The `target:` string as a target, or the problem with it.
fn read_target(node: Option<&Node>, problems: &mut Vec<Problem>) -> Option<Target> {
    let Some(node) = node else {
        problems.push(problem("target", "missing `target`"));
        return None;
    };
    let Some(s) = node.as_str() else {
        problems.push(problem(
            "target",
            format!(
                "must be a TVM target string like \"llvm -keys=cpu\", got {}",
                describe(node)
            ),
        ));
        return None;
    };
    match Target::parse(s) {
        Ok(t) => Some(t),
        Err(e) => {
            problems.push(problem("target", format!("invalid target: {e}")));
            None
        }
    }
}

/// Which op the `task_name:` is, or the problem with it (an unknown name
/// lists the names we read).
fn read_task(node: Option<&Node>, problems: &mut Vec<Problem>) -> Option<TaskKind> {
    let Some(node) = node else {
        problems.push(problem("task_name", "missing `task_name`"));
        return None;
    };
    let Some(name) = node.as_str() else {
        problems.push(problem(
            "task_name",
            format!("must be a string, got {}", describe(node)),
        ));
        return None;
    };
    let kind = task_kind(name);
    if kind.is_none() {
        problems.push(problem(
            "",
            format!(
                "unknown Lorien task name {} (supported: {})",
                quote(name),
                LORIEN_TASKS.join(", ")
            ),
        ));
    }
    kind
}

/// The `args:` list, or the problem with it.
fn read_args<'a>(node: Option<&'a Node>, problems: &mut Vec<Problem>) -> Option<&'a [Node]> {
    let Some(node) = node else {
        problems.push(problem("args", "missing `args`"));
        return None;
    };
    match &node.value {
        Yaml::Seq(items) => Some(items.as_slice()),
        _ => {
            problems.push(problem(
                "args",
                format!("must be a list, got {}", describe(node)),
            ));
            None
        }
    }
}

/// The task's arguments mapped onto our op (op, dtype and base name);
/// `lorien/args.rs` adds a problem for each argument it cannot map.
fn convert_args(
    kind: TaskKind,
    args: &[Node],
    problems: &mut Vec<Problem>,
) -> Option<(Op, String, String)> {
    let mut a = Args { args, problems };
    match kind {
        TaskKind::Conv2d => a.conv2d(),
        TaskKind::Depthwise => a.depthwise(),
        TaskKind::Dense => a.dense(),
        TaskKind::BatchMatmul => a.batch_matmul(),
    }
}

/// Our own checks on the converted workload: a Lorien file we read must never
/// give a workload the farm would refuse, so each error becomes a problem of
/// the item.
fn validated(workload: &Workload) -> Result<(), Vec<Problem>> {
    workload.validate().map_err(|errors| {
        errors
            .into_iter()
            .map(|e| {
                let field = e.field.map(|f| format!("{f}: ")).unwrap_or_default();
                problem(
                    "",
                    format!("the converted workload is invalid: {field}{}", e.message),
                )
            })
            .collect()
    })
}

/// The `{...}` text after an accepted tag, or why the string is refused.
fn strip_tag(text: &str) -> Result<&str, String> {
    let t = text.trim();
    let Some(rest) = t.strip_prefix(TAG_PREFIX) else {
        if t.starts_with('!') {
            let tag = t
                .split(|c: char| c.is_whitespace() || c == '{')
                .next()
                .unwrap_or("");
            return Err(format!(
                "unknown tag {} (only {TAG_PREFIX}CLASS with CLASS one of {} is read; tags are \
                 never evaluated)",
                quote(tag),
                LORIEN_CLASSES.join(", ")
            ));
        }
        return Err(format!(
            "expected a Lorien workload string starting with `{TAG_PREFIX}`, got {}",
            quote(t)
        ));
    };
    let end = rest
        .find(|c: char| c.is_whitespace() || c == '{')
        .unwrap_or(rest.len());
    let (class, body) = rest.split_at(end);
    if !LORIEN_CLASSES.contains(&class) {
        return Err(format!(
            "unknown Lorien class {} in the tag (supported: {}; tags are never evaluated)",
            quote(class),
            LORIEN_CLASSES.join(", ")
        ));
    }
    let body = body.trim();
    if !body.starts_with('{') {
        return Err(format!(
            "expected a `{{...}}` mapping after the tag {TAG_PREFIX}{class}"
        ));
    }
    Ok(body)
}

/// Characters of user text quoted in this importer's messages.
const QUOTE_CHARS: usize = 60;

/// A key as it appears in a field path.
fn field_key(key: &str) -> String {
    path_key(key, QUOTE_CHARS)
}

/// `"text"` with escapes, shortened to about 60 characters.
fn quote(s: &str) -> String {
    quote_at_most(s, QUOTE_CHARS)
}

fn describe(node: &Node) -> String {
    match &node.value {
        Yaml::Null => "null".into(),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Int(i) => i.to_string(),
        Yaml::Float(x) => format!("{x:?}"),
        Yaml::Str(s) => quote(s),
        Yaml::Seq(items) => {
            let ints: Option<Vec<String>> = items
                .iter()
                .take(9)
                .map(|n| match n.value {
                    Yaml::Int(i) => Some(i.to_string()),
                    _ => None,
                })
                .collect();
            match ints {
                Some(ints) if items.len() <= 8 => format!("[{}]", ints.join(", ")),
                _ => format!("a list of {} item(s)", items.len()),
            }
        }
        Yaml::Map(_) => "a mapping".into(),
    }
}

// ---------------------------------------------------------------------------
// YAML reading (data only: tags are not interpreted)
// ---------------------------------------------------------------------------

/// Same budget as the workload parser: deep nesting and alias bombs fail fast.
fn yaml_options() -> serde_saphyr::Options {
    crate::yaml_tree::options(1)
}

enum YamlProblem {
    Limit(String),
    Syntax(String),
}

fn error_location(err: &serde_saphyr::Error) -> (Option<usize>, Option<usize>) {
    match err.location() {
        Some(loc) => (
            usize::try_from(loc.line()).ok().filter(|l| *l > 0),
            usize::try_from(loc.column()).ok().filter(|c| *c > 0),
        ),
        None => (None, None),
    }
}

fn yaml_error_message(err: &serde_saphyr::Error) -> YamlProblem {
    use serde_saphyr::Error as E;
    use serde_saphyr::MessageFormatter;
    let mut inner = err.without_snippet();
    for _ in 0..8 {
        match inner {
            E::AliasError { error, .. } | E::WithSnippet { error, .. } => inner = error,
            _ => break,
        }
    }
    let message = escape_controls(&serde_saphyr::DefaultMessageFormatter.format_message(inner));
    match inner {
        E::Budget { .. }
        | E::AliasReplayLimitExceeded { .. }
        | E::AliasExpansionLimitExceeded { .. }
        | E::AliasReplayStackDepthExceeded { .. } => YamlProblem::Limit(format!(
            "it exceeds a parser limit (nesting deeper than {MAX_YAML_DEPTH}, too many values or \
             aliases): {message}"
        )),
        _ if message.contains("recursion limit exceeded") => YamlProblem::Limit(format!(
            "it is nested more than {MAX_YAML_DEPTH} levels deep"
        )),
        _ if message.trim().is_empty() => YamlProblem::Syntax("syntax error".into()),
        _ => YamlProblem::Syntax(message),
    }
}
