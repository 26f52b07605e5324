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
//! once as [`WorkloadErrors`] (at most [`MAX_REPORTED_ERRORS`], then a count),
//! each with the file name, the line of the offending list item and a field
//! path: `workload[3]` for the item, `workload[3].args[3]` for one argument.
//! The same resource limits apply (file size, workload count, YAML budget), and
//! nothing here panics or does I/O: this module is compiled to wasm32 too.

use crate::target::Target;
use crate::workload::{check_range, escape_controls, path_key, quote_at_most, Ctx as Errors};
use crate::workload::{
    BatchMatmulShape, Conv2dShape, DenseShape, DepthwiseConv2dShape, Op, Workload, WorkloadErrors,
    DEFAULT_DTYPE, DTYPES, MAX_TRIALS, MAX_WORKLOADS_PER_FILE, MAX_WORKLOAD_FILE_BYTES,
    MAX_YAML_DEPTH,
};
use crate::yaml_tree::{Node, Yaml};
use serde_json::Value;
use std::collections::HashSet;
use std::fmt::Write as _;

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
    let mapping = match serde_saphyr::from_str_with_options::<Node>(body, yaml_options()) {
        Ok(node) => node,
        Err(err) => {
            let column = error_location(&err).1;
            let (YamlProblem::Limit(m) | YamlProblem::Syntax(m)) = yaml_error_message(&err);
            let at = column
                .map(|c| format!(" (at character {c} of the mapping)"))
                .unwrap_or_default();
            return Err(vec![problem(
                "",
                format!("invalid workload mapping after the tag: {m}{at}"),
            )]);
        }
    };
    let Yaml::Map(entries) = &mapping.value else {
        return Err(vec![problem(
            "",
            format!(
                "expected a `{{...}}` mapping after the tag, got {}",
                describe(&mapping)
            ),
        )]);
    };

    let mut problems = Vec::new();
    let (mut task, mut args, mut target) = (None, None, None);
    for (key, value) in entries {
        let Some(k) = key.as_str() else {
            problems.push(problem(
                "",
                format!("keys must be strings, got {}", describe(key)),
            ));
            continue;
        };
        match k {
            "task_name" => task = Some(value),
            "args" => args = Some(value),
            "target" => target = Some(value),
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

    let target = match target {
        None => {
            problems.push(problem("target", "missing `target`"));
            None
        }
        Some(node) => match node.as_str() {
            Some(s) => match Target::parse(s) {
                Ok(t) => Some(t),
                Err(e) => {
                    problems.push(problem("target", format!("invalid target: {e}")));
                    None
                }
            },
            None => {
                problems.push(problem(
                    "target",
                    format!(
                        "must be a TVM target string like \"llvm -keys=cpu\", got {}",
                        describe(node)
                    ),
                ));
                None
            }
        },
    };

    let kind = match task {
        None => {
            problems.push(problem("task_name", "missing `task_name`"));
            None
        }
        Some(node) => match node.as_str() {
            Some(name) => match task_kind(name) {
                Some(kind) => Some(kind),
                None => {
                    problems.push(problem(
                        "",
                        format!(
                            "unknown Lorien task name {} (supported: {})",
                            quote(name),
                            LORIEN_TASKS.join(", ")
                        ),
                    ));
                    None
                }
            },
            None => {
                problems.push(problem(
                    "task_name",
                    format!("must be a string, got {}", describe(node)),
                ));
                None
            }
        },
    };

    let args = match args {
        None => {
            problems.push(problem("args", "missing `args`"));
            None
        }
        Some(node) => match &node.value {
            Yaml::Seq(items) => Some(items.as_slice()),
            _ => {
                problems.push(problem(
                    "args",
                    format!("must be a list, got {}", describe(node)),
                ));
                None
            }
        },
    };

    let converted = match (kind, args) {
        (Some(kind), Some(args)) => {
            let mut a = Args {
                args,
                problems: &mut problems,
            };
            match kind {
                TaskKind::Conv2d => a.conv2d(),
                TaskKind::Depthwise => a.depthwise(),
                TaskKind::Dense => a.dense(),
                TaskKind::BatchMatmul => a.batch_matmul(),
            }
        }
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
    if let Err(errors) = workload.validate() {
        return Err(errors
            .into_iter()
            .map(|e| {
                let field = e.field.map(|f| format!("{f}: ")).unwrap_or_default();
                problem(
                    "",
                    format!("the converted workload is invalid: {field}{}", e.message),
                )
            })
            .collect());
    }
    Ok((workload, base))
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

/// Reads the `args` list of one workload, recording problems.
struct Args<'a, 'p> {
    args: &'a [Node],
    problems: &'p mut Vec<Problem>,
}

/// The arguments shared by conv2d and depthwise tasks.
struct ConvArgs {
    data: Tensor,
    kernel: Tensor,
    stride: [u32; 2],
    padding: [u32; 2],
    dilation: [u32; 2],
}

/// A tensor argument: its dimensions and dtype.
struct Tensor {
    dims: Vec<u32>,
    dtype: String,
}

impl Args<'_, '_> {
    fn fail(&mut self, index: usize, message: String) {
        self.problems
            .push(problem(format!("args[{index}]"), message));
    }

    /// Checks the argument count; `counts` are the accepted lengths.
    fn count(&mut self, counts: &[usize], signature: &str) -> bool {
        if counts.contains(&self.args.len()) {
            return true;
        }
        let accepted: Vec<String> = counts.iter().map(usize::to_string).collect();
        self.problems.push(problem(
            "args",
            format!(
                "expected {} arguments ({signature}), got {}",
                accepted.join(" or "),
                self.args.len()
            ),
        ));
        false
    }

    fn count_range(&mut self, min: usize, max: usize, signature: &str) -> bool {
        if (min..=max).contains(&self.args.len()) {
            return true;
        }
        self.problems.push(problem(
            "args",
            format!(
                "expected {min} to {max} arguments ({signature}), got {}",
                self.args.len()
            ),
        ));
        false
    }

    /// `[TENSOR, [dims...], dtype]` with `rank` dimensions described by `layout`.
    fn tensor(&mut self, index: usize, what: &str, layout: &str) -> Option<Tensor> {
        let node = self.args.get(index)?;
        let rank = layout.split(',').count();
        let items = match &node.value {
            Yaml::Seq(items) if items.len() == 3 && items[0].as_str() == Some("TENSOR") => items,
            _ => {
                let msg = format!(
                    "the {what} must be a tensor [TENSOR, {layout}, dtype], got {}",
                    describe(node)
                );
                self.fail(index, msg);
                return None;
            }
        };
        let mut ok = true;
        let dims: Vec<i128> = match &items[1].value {
            Yaml::Seq(dims) => dims
                .iter()
                .map(|d| match d.value {
                    Yaml::Int(v) => v,
                    _ => {
                        ok = false;
                        0
                    }
                })
                .collect(),
            _ => {
                ok = false;
                Vec::new()
            }
        };
        if !ok || dims.len() != rank {
            let msg = format!(
                "the {what} must be a {rank}-D tensor {layout}, got shape {}",
                describe(&items[1])
            );
            self.fail(index, msg);
            return None;
        }
        let mut out = Vec::with_capacity(rank);
        for (i, v) in dims.iter().enumerate() {
            match check_range(*v, 1) {
                Ok(v) => out.push(v),
                Err(m) => {
                    self.fail(index, format!("the {what}'s dimension {i} {m}"));
                    ok = false;
                }
            }
        }
        let dtype = match items[2].as_str() {
            Some(d) if DTYPES.contains(&d) => d.to_string(),
            _ => {
                let msg = format!(
                    "the {what}'s dtype {} is not supported (supported: {})",
                    describe(&items[2]),
                    DTYPES.join(", ")
                );
                self.fail(index, msg);
                return None;
            }
        };
        ok.then_some(Tensor { dims: out, dtype })
    }

    /// One integer or a list of integers, each at least `min`.
    fn ints(&mut self, index: usize, what: &str, min: u32) -> Option<Vec<u32>> {
        let node = self.args.get(index)?;
        let values: Vec<&Node> = match &node.value {
            Yaml::Int(_) => vec![node],
            Yaml::Seq(items) => items.iter().collect(),
            _ => {
                let msg = format!("{what} must be integers, got {}", describe(node));
                self.fail(index, msg);
                return None;
            }
        };
        let mut out = Vec::with_capacity(values.len());
        for v in values {
            let checked = match v.value {
                Yaml::Int(i) => check_range(i, min),
                _ => Err(format!("must be an integer, got {}", describe(v))),
            };
            match checked {
                Ok(x) => out.push(x),
                Err(m) => {
                    self.fail(index, format!("{what}: {m}"));
                    return None;
                }
            }
        }
        Some(out)
    }

    /// Strides or dilation: one integer or `[h, w]`.
    fn pair(&mut self, index: usize, what: &str) -> Option<[u32; 2]> {
        let values = self.ints(index, what, 1)?;
        match values.as_slice() {
            [v] => Some([*v, *v]),
            [h, w] => Some([*h, *w]),
            _ => {
                let msg = format!(
                    "{what} must be one integer or [height, width], got {} values",
                    values.len()
                );
                self.fail(index, msg);
                None
            }
        }
    }

    /// Padding: one integer, `[h, w]` or a symmetric `[top, left, bottom, right]`.
    fn padding(&mut self, index: usize) -> Option<[u32; 2]> {
        let values = self.ints(index, "padding", 0)?;
        match values.as_slice() {
            [v] => Some([*v, *v]),
            [h, w] => Some([*h, *w]),
            [top, left, bottom, right] if top == bottom && left == right => Some([*top, *left]),
            [top, left, bottom, right] => {
                let msg = format!(
                    "asymmetric padding [{top}, {left}, {bottom}, {right}] (top, left, bottom, \
                     right) cannot be expressed as a symmetric [height, width] pair: tunefleet \
                     pads both sides of an axis by the same amount"
                );
                self.fail(index, msg);
                None
            }
            _ => {
                let msg = format!(
                    "padding must be one integer, [height, width] or [top, left, bottom, right], \
                     got {} values",
                    values.len()
                );
                self.fail(index, msg);
                None
            }
        }
    }

    /// An optional dtype argument (`out_dtype`): a string or null.
    fn opt_dtype(&mut self, index: usize) {
        if let Some(node) = self.args.get(index) {
            if !matches!(node.value, Yaml::Str(_) | Yaml::Null) {
                let msg = format!("out_dtype must be a dtype or null, got {}", describe(node));
                self.fail(index, msg);
            }
        }
    }

    /// An optional boolean argument; `default` when absent or null.
    fn opt_bool(&mut self, index: usize, what: &str, default: bool) -> bool {
        match self.args.get(index).map(|n| &n.value) {
            None | Some(Yaml::Null) => default,
            Some(Yaml::Bool(b)) => *b,
            Some(_) => {
                let msg = format!(
                    "{what} must be true or false, got {}",
                    self.args.get(index).map(describe).unwrap_or_default()
                );
                self.fail(index, msg);
                default
            }
        }
    }

    /// Data and weight must share a dtype (our format has one dtype per workload).
    fn same_dtype(&mut self, index: usize, data: &Tensor, weight: &Tensor) -> bool {
        if data.dtype == weight.dtype {
            return true;
        }
        let msg = format!(
            "the weight's dtype {} differs from the data's {}: mixed input dtypes are not \
             supported",
            weight.dtype, data.dtype
        );
        self.fail(index, msg);
        false
    }

    /// The shared part of conv2d and depthwise: data, kernel, strides, padding,
    /// dilation, optional layouts, out_dtype.
    fn conv_common(&mut self, kernel_layout: &str) -> Option<ConvArgs> {
        if !self.count(
            &[6, 8],
            "data, kernel, strides, padding, dilation, [layout, out_layout,] out_dtype",
        ) {
            return None;
        }
        let data = self.tensor(0, "data", "[N, C, H, W]");
        let kernel = self.tensor(1, "kernel", kernel_layout);
        let stride = self.pair(2, "strides");
        let padding = self.padding(3);
        let dilation = self.pair(4, "dilation");
        let mut layout_ok = true;
        if self.args.len() == 8 {
            if self.args[5].as_str() != Some("NCHW") {
                let msg = format!(
                    "only the data layout \"NCHW\" is supported, got {}",
                    describe(&self.args[5])
                );
                self.fail(5, msg);
                layout_ok = false;
            }
            if self.args[6].as_str().is_none() {
                let msg = format!(
                    "out_layout must be a string, got {}",
                    describe(&self.args[6])
                );
                self.fail(6, msg);
            }
            self.opt_dtype(7);
        } else {
            self.opt_dtype(5);
        }
        let (data, kernel) = (data?, kernel?);
        if !layout_ok || !self.same_dtype(1, &data, &kernel) {
            return None;
        }
        Some(ConvArgs {
            data,
            kernel,
            stride: stride?,
            padding: padding?,
            dilation: dilation?,
        })
    }

    fn conv2d(&mut self) -> Option<(Op, String, String)> {
        let ConvArgs {
            data,
            kernel,
            stride,
            padding,
            dilation,
        } = self.conv_common("[O, I, KH, KW]")?;
        let &[n, c, h, w] = data.dims.as_slice() else {
            return None;
        };
        let &[o, i, kh, kw] = kernel.dims.as_slice() else {
            return None;
        };
        if i != c {
            self.fail(
                1,
                format!(
                    "the kernel has {i} input channels but the data has {c}: grouped \
                     convolutions are not supported"
                ),
            );
            return None;
        }
        let name = format!(
            "conv2d_{n}x{c}x{h}x{w}_{o}x{kh}x{kw}_s{}_p{}{}{}",
            pair_text(stride),
            pair_text(padding),
            dilation_suffix(dilation),
            dtype_suffix(&data.dtype)
        );
        let shape = Conv2dShape {
            batch: n,
            in_channels: c,
            height: h,
            width: w,
            out_channels: o,
            kernel: [kh, kw],
            stride,
            padding,
            dilation,
        };
        Some((Op::Conv2dNchw { shape }, data.dtype, name))
    }

    fn depthwise(&mut self) -> Option<(Op, String, String)> {
        let ConvArgs {
            data,
            kernel,
            stride,
            padding,
            dilation,
        } = self.conv_common("[C, multiplier, KH, KW]")?;
        let &[n, c, h, w] = data.dims.as_slice() else {
            return None;
        };
        let &[kc, m, kh, kw] = kernel.dims.as_slice() else {
            return None;
        };
        if kc != c {
            self.fail(
                1,
                format!(
                    "the depthwise kernel [C, multiplier, KH, KW] has {kc} channels but the data \
                     has {c}"
                ),
            );
            return None;
        }
        let name = format!(
            "depthwise_conv2d_{n}x{c}x{h}x{w}_m{m}_{kh}x{kw}_s{}_p{}{}{}",
            pair_text(stride),
            pair_text(padding),
            dilation_suffix(dilation),
            dtype_suffix(&data.dtype)
        );
        let shape = DepthwiseConv2dShape {
            batch: n,
            channels: c,
            height: h,
            width: w,
            multiplier: m,
            kernel: [kh, kw],
            stride,
            padding,
            dilation,
        };
        Some((Op::DepthwiseConv2dNchw { shape }, data.dtype, name))
    }

    fn dense(&mut self) -> Option<(Op, String, String)> {
        if !self.count_range(2, 4, "data, weight, [bias, [out_dtype]]") {
            return None;
        }
        let data = self.tensor(0, "data", "[M, K]");
        let weight = self.tensor(1, "weight", "[N, K]");
        if let Some(bias) = self.args.get(2) {
            let is_tensor = matches!(&bias.value, Yaml::Seq(items)
                if items.first().and_then(Node::as_str) == Some("TENSOR"));
            if !is_tensor && !matches!(bias.value, Yaml::Null) {
                let msg = format!("the bias must be a tensor or null, got {}", describe(bias));
                self.fail(2, msg);
            }
        }
        self.opt_dtype(3);
        let (data, weight) = (data?, weight?);
        if !self.same_dtype(1, &data, &weight) {
            return None;
        }
        let &[m, k] = data.dims.as_slice() else {
            return None;
        };
        let &[n, wk] = weight.dims.as_slice() else {
            return None;
        };
        if wk != k {
            self.fail(
                1,
                format!("the weight [N, K] has K = {wk} but the data [M, K] has K = {k}"),
            );
            return None;
        }
        let name = format!("dense_{m}x{k}_{n}{}", dtype_suffix(&data.dtype));
        let shape = DenseShape {
            batch: m,
            in_features: k,
            out_features: n,
        };
        Some((Op::Dense { shape }, data.dtype, name))
    }

    fn batch_matmul(&mut self) -> Option<(Op, String, String)> {
        if !self.count_range(
            2,
            6,
            "A, B, [out_shape, [out_dtype, [transpose_a, [transpose_b]]]]",
        ) {
            return None;
        }
        let transpose_a = self.opt_bool(4, "transpose_a", false);
        let transpose_b = self.opt_bool(5, "transpose_b", true);
        let a_layout = if transpose_a {
            "[B, K, M]"
        } else {
            "[B, M, K]"
        };
        let b_layout = if transpose_b {
            "[B, N, K]"
        } else {
            "[B, K, N]"
        };
        let a = self.tensor(0, "tensor A", a_layout);
        let b = self.tensor(1, "tensor B", b_layout);
        self.opt_dtype(3);
        let (a, b) = (a?, b?);
        if !self.same_dtype(1, &a, &b) {
            return None;
        }
        let &[ab, a1, a2] = a.dims.as_slice() else {
            return None;
        };
        let &[bb, b1, b2] = b.dims.as_slice() else {
            return None;
        };
        let (m, k) = if transpose_a { (a2, a1) } else { (a1, a2) };
        let (n, bk) = if transpose_b { (b1, b2) } else { (b2, b1) };
        if ab != bb {
            self.fail(
                1,
                format!(
                    "A has batch {ab} but B has batch {bb}: batch broadcasting is not supported"
                ),
            );
            return None;
        }
        if bk != k {
            self.fail(1, format!("B has K = {bk} but A has K = {k}"));
            return None;
        }
        if let Some(node) = self.args.get(2) {
            match &node.value {
                Yaml::Null => {}
                Yaml::Seq(items)
                    if items.len() == 3
                        && items.iter().zip([ab, m, n]).all(
                            |(d, want)| matches!(d.value, Yaml::Int(v) if v == i128::from(want)),
                        ) => {}
                _ => {
                    let msg = format!(
                        "out_shape must be null or [{ab}, {m}, {n}] (batch, M, N), got {}",
                        describe(node)
                    );
                    self.fail(2, msg);
                    return None;
                }
            }
        }
        let name = format!("batch_matmul_{ab}x{m}x{k}_{n}{}", dtype_suffix(&a.dtype));
        let shape = BatchMatmulShape { batch: ab, m, n, k };
        Some((Op::BatchMatmul { shape }, a.dtype, name))
    }
}

/// `1` for `[1, 1]`, `2x1` for `[2, 1]`.
fn pair_text([a, b]: [u32; 2]) -> String {
    if a == b {
        a.to_string()
    } else {
        format!("{a}x{b}")
    }
}

fn dilation_suffix(dilation: [u32; 2]) -> String {
    if dilation == [1, 1] {
        String::new()
    } else {
        format!("_d{}", pair_text(dilation))
    }
}

fn dtype_suffix(dtype: &str) -> String {
    if dtype == DEFAULT_DTYPE {
        String::new()
    } else {
        format!("_{dtype}")
    }
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
// Errors
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Writing our format
// ---------------------------------------------------------------------------

/// Writes `workloads` as a tunefleet workload file (block style, one entry per
/// workload, every field explicit) that [`crate::workload::parse_workload_file`]
/// reads back as the same workloads, so with the same job ids. The header
/// comment says it was converted from a Lorien file; see
/// [`to_tunefleet_yaml_from`] to name the file.
pub fn to_tunefleet_yaml(workloads: &[Workload]) -> String {
    render(workloads, None)
}

/// [`to_tunefleet_yaml`] with the header naming the Lorien file `source`.
pub fn to_tunefleet_yaml_from(workloads: &[Workload], source: &str) -> String {
    render(workloads, Some(source))
}

fn render(workloads: &[Workload], source: Option<&str>) -> String {
    let mut out = String::new();
    let from = match source {
        Some(s) => {
            // A comment ends at a line break: keep the name on one line.
            let s: String = s
                .chars()
                .map(|c| if needs_escape(c) { '?' } else { c })
                .collect();
            format!("{s} (a Lorien workload file)")
        }
        None => "a Lorien workload file".into(),
    };
    let _ = writeln!(out, "# Converted from {from} by `tunefleet import-lorien`.");
    let _ = writeln!(
        out,
        "# {} workload(s). Job ids depend on op, shape, dtype, target and trials, not on names.",
        workloads.len()
    );
    if workloads.is_empty() {
        out.push_str("workloads: []\n");
        return out;
    }
    out.push_str("workloads:\n");
    for w in workloads {
        let _ = writeln!(out, "  - name: {}", scalar(&w.name));
        let _ = writeln!(out, "    op: {}", w.op.name());
        match &w.op {
            Op::Tvmscript { tvmscript } => write_tvmscript(&mut out, tvmscript),
            op => {
                out.push_str("    shape:\n");
                for (key, value) in shape_fields(op) {
                    let _ = writeln!(out, "      {key}: {value}");
                }
            }
        }
        let _ = writeln!(out, "    dtype: {}", scalar(&w.dtype));
        let _ = writeln!(out, "    target: {}", target_flow(&w.target));
        let _ = writeln!(out, "    trials: {}", w.trials);
    }
    out
}

fn shape_fields(op: &Op) -> Vec<(&'static str, String)> {
    let pair = |p: [u32; 2]| format!("[{}, {}]", p[0], p[1]);
    let n = |v: u32| v.to_string();
    match op {
        Op::Matmul { shape: s } => vec![("m", n(s.m)), ("n", n(s.n)), ("k", n(s.k))],
        Op::BatchMatmul { shape: s } => vec![
            ("batch", n(s.batch)),
            ("m", n(s.m)),
            ("n", n(s.n)),
            ("k", n(s.k)),
        ],
        Op::Dense { shape: s } => vec![
            ("batch", n(s.batch)),
            ("in_features", n(s.in_features)),
            ("out_features", n(s.out_features)),
        ],
        Op::Conv2dNchw { shape: s } | Op::Conv2dNhwc { shape: s } => vec![
            ("batch", n(s.batch)),
            ("in_channels", n(s.in_channels)),
            ("height", n(s.height)),
            ("width", n(s.width)),
            ("out_channels", n(s.out_channels)),
            ("kernel", pair(s.kernel)),
            ("stride", pair(s.stride)),
            ("padding", pair(s.padding)),
            ("dilation", pair(s.dilation)),
        ],
        Op::DepthwiseConv2dNchw { shape: s } => vec![
            ("batch", n(s.batch)),
            ("channels", n(s.channels)),
            ("height", n(s.height)),
            ("width", n(s.width)),
            ("multiplier", n(s.multiplier)),
            ("kernel", pair(s.kernel)),
            ("stride", pair(s.stride)),
            ("padding", pair(s.padding)),
            ("dilation", pair(s.dilation)),
        ],
        Op::Tvmscript { .. } | Op::Model { .. } => Vec::new(),
    }
}

/// A literal block (`|`) when the text allows one, else a double-quoted string.
fn write_tvmscript(out: &mut String, text: &str) {
    let literal_ok = text.ends_with('\n')
        && !text.ends_with("\n\n")
        && text
            .chars()
            .next()
            .is_some_and(|c| !c.is_whitespace() && c != '#')
        && !text
            .chars()
            .any(|c| c != '\n' && c != '\t' && needs_escape(c));
    if !literal_ok {
        let _ = writeln!(out, "    tvmscript: {}", double_quoted(text));
        return;
    }
    out.push_str("    tvmscript: |\n");
    for line in text.lines() {
        if line.is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "      {line}");
        }
    }
}

/// The target as a flow mapping, `kind` first.
fn target_flow(target: &Target) -> String {
    let attrs = target.attrs();
    let entries: Vec<String> = attrs
        .get("kind")
        .map(|kind| ("kind", kind))
        .into_iter()
        .chain(
            attrs
                .iter()
                .filter(|(k, _)| k.as_str() != "kind")
                .map(|(k, v)| (k.as_str(), v)),
        )
        .map(|(k, v)| format!("{}: {}", scalar(k), flow(v)))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

/// A value in YAML flow style (JSON-like, plain scalars where unambiguous).
fn flow(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => scalar(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(flow).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(map) => {
            let entries: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", scalar(k), flow(v)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
    }
}

/// A string as a YAML scalar: plain when it can only be read back as that
/// string (in block and flow context alike), else double-quoted.
fn scalar(s: &str) -> String {
    const RESERVED: [&str; 13] = [
        "true", "false", "null", "yes", "no", "on", "off", "y", "n", "inf", "nan", "nil", "none",
    ];
    let plain = s.len() <= 200
        && s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
        && !RESERVED.contains(&s.to_ascii_lowercase().as_str());
    if plain {
        s.to_string()
    } else {
        double_quoted(s)
    }
}

/// Characters that must not appear raw in YAML text.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
        )
}

fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if needs_escape(c) => {
                let code = u32::from(c);
                if code <= 0xffff {
                    let _ = write!(out, "\\u{code:04x}");
                } else {
                    let _ = write!(out, "\\U{code:08x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests;
