//! The workload format: what users write in a YAML file, how it is checked, and
//! how a workload gets its stable job id.
//!
//! # Format
//!
//! ```yaml
//! target: {kind: llvm, num-cores: 2}   # default target for the file
//! trials: 64                            # default trial budget per workload
//! dtype: float32                        # default dtype (optional; float32 if absent everywhere)
//! workloads:
//!   - name: mm128
//!     op: matmul
//!     shape: {m: 128, n: 128, k: 128}
//!   - name: conv3x3
//!     op: conv2d_nchw
//!     shape: {batch: 1, in_channels: 64, height: 56, width: 56, out_channels: 64,
//!             kernel: [3, 3], stride: [1, 1], padding: [1, 1], dilation: [1, 1]}
//!     dtype: float16                    # overrides the file default
//!     trials: 200                       # overrides the file default
//!   - name: vadd
//!     tvmscript: |                      # escape hatch: any PrimFunc as TVMScript
//!       @T.prim_func(s_tir=True)
//!       def main(A: T.Buffer((4096,), "float32"), ...):
//!           ...
//! ```
//!
//! The TVMScript text is meant for `tvm.script.from_source`, which binds `T`
//! (in TVM 0.27: `tvm.script.tirx`) and rejects `import` statements, so the
//! script starts at the decorator; see `examples/more.yaml` for a complete one.
//!
//! The top level is a mapping with the keys `workloads` (required), `target`,
//! `trials` and `dtype` (file defaults). Each workload has `name`, then either
//! `op` + `shape` or `tvmscript` (`op: tvmscript` is accepted too), and may
//! override `target`, `trials` and `dtype`. Block and flow style YAML both work,
//! and a file may hold several YAML documents (`---`): each is a section with its
//! own defaults; names must be unique across the whole file.
//!
//! Ops and their `shape` keys:
//!
//! | op | shape keys |
//! |----|------------|
//! | `matmul` | `m, n, k` (C\[m,n\] = A\[m,k\] · B\[k,n\]) |
//! | `batch_matmul` | `batch, m, n, k` (C\[b,m,n\] = A\[b,m,k\] · B\[b,n,k\]ᵀ, TVM's `nn.batch_matmul` layout) |
//! | `dense` | `batch, in_features, out_features` (Y\[b,out\] = X\[b,in\] · W\[out,in\]ᵀ) |
//! | `conv2d_nchw`, `conv2d_nhwc` | `batch, in_channels, height, width, out_channels, kernel, stride?, padding?, dilation?` |
//! | `depthwise_conv2d_nchw` | `batch, channels, height, width, multiplier, kernel, stride?, padding?, dilation?` |
//!
//! `kernel`, `stride`, `padding` and `dilation` are `[h, w]` or one integer for
//! both; missing `stride`/`padding`/`dilation` mean `[1, 1]`/`[0, 0]`/`[1, 1]`.
//! `padding` is symmetric (the same amount on both sides of an axis).
//!
//! # Validation
//!
//! Parsing never stops at the first problem: every problem in the file is
//! reported at once as a [`WorkloadErrors`], each with the file name, the line
//! (of the offending value or key, or of the workload entry when something is
//! missing), a field path such as `workloads[1].shape.height` and a message,
//! e.g. `more.yaml:12: workloads[1].shape.height: must be a positive integer, got -3`.
//!
//! The YAML is first read into a small tree that keeps the line and column of
//! every node (serde-saphyr's [`serde_saphyr::Spanned`]); the checks then walk
//! that tree, and the errors are sorted by position. Syntax errors keep
//! serde-saphyr's line and column and have no field. Rules:
//!
//! - YAML 1.1 booleans (`y`, `n`, `yes`, `off`, ...) are plain strings, so the
//!   matmul key `n` stays a key; only `true`/`false` are booleans. Duplicate keys
//!   are syntax errors; anchors, aliases and `<<` merge keys work.
//!
//! - Unknown keys anywhere are errors (with a "did you mean" hint), so a typo like
//!   `shpae` cannot silently drop a field. Keys must be strings.
//! - `name`: required, unique in the file, 1–[`MAX_NAME_CHARS`] characters, no
//!   control characters; surrounding whitespace is trimmed.
//! - `target`: required at the file level or on the workload; a mapping (converted
//!   to JSON) or a string (JSON or legacy `llvm -mcpu=... -num-cores=4`), parsed by
//!   [`Target::parse`].
//! - `trials`: integer in 1..=[`MAX_TRIALS`]; defaults to [`DEFAULT_TRIALS`].
//! - `dtype`: one of [`DTYPES`]; defaults to [`DEFAULT_DTYPE`] (float32). For a
//!   tvmscript workload the script defines the real types and `dtype` is only a label.
//! - Dimensions: integers in 1..=[`MAX_DIM`] (padding may be 0). Quoted numbers
//!   and floats are rejected. A convolution whose dilated kernel does not fit in
//!   the padded input (empty output) is rejected, and so is any workload with an
//!   input, weight or output tensor of more than [`MAX_TENSOR_ELEMENTS`] (2^34)
//!   elements: such sizes are typos, not tuning jobs.
//! - `tvmscript`: non-empty, at most [`MAX_TVMSCRIPT_BYTES`], must mention
//!   `prim_func`; cannot be combined with `shape` or another op.
//!
//! # Resource limits
//!
//! Files come from the network (the master) and from the browser, so parsing is
//! bounded: text over [`MAX_WORKLOAD_FILE_BYTES`] is refused before any parsing,
//! a file holds at most [`MAX_WORKLOADS_PER_FILE`] workloads, and the YAML parser
//! runs with a budget (nesting depth [`MAX_YAML_DEPTH`], node and event counts,
//! alias expansion) so deep nesting and alias bombs fail fast with an error. At
//! most [`MAX_REPORTED_ERRORS`] errors are reported. Nothing here panics or does I/O.
//!
//! # Identity
//!
//! [`Workload::job_id`] is the first 16 hex digits of the SHA-256 of the
//! normalised workload *without its name*: op, shape (kernel/stride/padding/
//! dilation as pairs, defaults filled in), dtype (defaults filled in), target
//! (canonical JSON, keys sorted, legacy strings converted) and trials. The same
//! workload submitted twice under different names is therefore a duplicate, while
//! any change to shape, dtype, target or trials makes a new job. TVMScript text
//! is normalised only in line endings and trailing whitespace.

use crate::model::{ModelStage, TunerSettings, TUNER_KEYS};
use crate::target::Target;
use crate::yaml_tree::{Node, Yaml};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;

/// Workload files larger than this are refused before parsing.
pub const MAX_WORKLOAD_FILE_BYTES: usize = 16 * 1024 * 1024;
/// At most this many workloads in one file.
pub const MAX_WORKLOADS_PER_FILE: usize = 10_000;
/// At most this many errors are reported for one file; the rest are counted.
pub const MAX_REPORTED_ERRORS: usize = 100;
/// Longest workload name, in characters.
pub const MAX_NAME_CHARS: usize = 128;
/// Largest trial budget for one workload.
pub const MAX_TRIALS: u32 = 100_000;
/// Trial budget when neither the file nor the workload gives one.
pub const DEFAULT_TRIALS: u32 = 64;
/// Data type when neither the file nor the workload gives one.
pub const DEFAULT_DTYPE: &str = "float32";
/// Largest value of any single dimension, kernel size, stride, padding or dilation.
pub const MAX_DIM: u32 = 1_000_000;
/// Largest number of elements of any input, weight or output tensor (2^34).
pub const MAX_TENSOR_ELEMENTS: u64 = 1 << 34;
/// Longest TVMScript text, in bytes.
pub const MAX_TVMSCRIPT_BYTES: usize = 1024 * 1024;
/// Deepest YAML nesting accepted (the format itself needs about 6 levels).
pub const MAX_YAML_DEPTH: usize = 24;

/// Every `op` value, in the order error messages list them.
pub const OPS: [&str; 7] = [
    "matmul",
    "batch_matmul",
    "dense",
    "conv2d_nchw",
    "conv2d_nhwc",
    "depthwise_conv2d_nchw",
    "tvmscript",
];

/// Every accepted `dtype`, in TVM spelling.
pub const DTYPES: [&str; 12] = [
    "float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8",
    "uint16", "uint32", "uint64",
];

const TOP_KEYS: [&str; 5] = ["workloads", "target", "trials", "dtype", "tuner"];
const WORKLOAD_KEYS: [&str; 8] = [
    "name",
    "op",
    "shape",
    "dtype",
    "target",
    "trials",
    "tvmscript",
    "tuner",
];

/// `C[m, n] = A[m, k] · B[k, n]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MatmulShape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
}

/// `C[b, m, n] = A[b, m, k] · B[b, k, n]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BatchMatmulShape {
    pub batch: u32,
    pub m: u32,
    pub n: u32,
    pub k: u32,
}

/// `Y[batch, out] = X[batch, in] · W[out, in]ᵀ`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DenseShape {
    pub batch: u32,
    pub in_features: u32,
    pub out_features: u32,
}

/// A 2-D convolution; the layout (NCHW or NHWC) is given by the [`Op`] variant.
/// Pairs are `[height, width]`; padding is symmetric.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Conv2dShape {
    pub batch: u32,
    pub in_channels: u32,
    pub height: u32,
    pub width: u32,
    pub out_channels: u32,
    pub kernel: [u32; 2],
    pub stride: [u32; 2],
    pub padding: [u32; 2],
    pub dilation: [u32; 2],
}

/// A depthwise 2-D convolution in NCHW: `channels * multiplier` output channels.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DepthwiseConv2dShape {
    pub batch: u32,
    pub channels: u32,
    pub height: u32,
    pub width: u32,
    pub multiplier: u32,
    pub kernel: [u32; 2],
    pub stride: [u32; 2],
    pub padding: [u32; 2],
    pub dilation: [u32; 2],
}

impl Conv2dShape {
    /// Output `[height, width]`, or `None` when the output would be empty.
    pub fn output_size(&self) -> Option<[u64; 2]> {
        conv_output_size(
            [self.height, self.width],
            self.kernel,
            self.stride,
            self.padding,
            self.dilation,
        )
    }
}

impl DepthwiseConv2dShape {
    /// Output `[height, width]`, or `None` when the output would be empty.
    pub fn output_size(&self) -> Option<[u64; 2]> {
        conv_output_size(
            [self.height, self.width],
            self.kernel,
            self.stride,
            self.padding,
            self.dilation,
        )
    }

    /// Number of output channels (`channels * multiplier`).
    pub fn out_channels(&self) -> u64 {
        u64::from(self.channels) * u64::from(self.multiplier)
    }
}

fn conv_axis(input: u32, kernel: u32, stride: u32, pad: u32, dilation: u32) -> Option<u64> {
    let padded = u64::from(input) + 2 * u64::from(pad);
    let effective = u64::from(dilation) * u64::from(kernel.checked_sub(1)?) + 1;
    if stride == 0 || effective > padded {
        return None;
    }
    Some((padded - effective) / u64::from(stride) + 1)
}

fn conv_output_size(
    input: [u32; 2],
    kernel: [u32; 2],
    stride: [u32; 2],
    padding: [u32; 2],
    dilation: [u32; 2],
) -> Option<[u64; 2]> {
    Some([
        conv_axis(input[0], kernel[0], stride[0], padding[0], dilation[0])?,
        conv_axis(input[1], kernel[1], stride[1], padding[1], dilation[1])?,
    ])
}

/// The operator of a workload. On the wire it is flattened into the workload
/// object: `"op": "matmul", "shape": {...}` or `"op": "tvmscript", "tvmscript": "..."`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "op")]
pub enum Op {
    #[serde(rename = "matmul")]
    Matmul { shape: MatmulShape },
    #[serde(rename = "batch_matmul")]
    BatchMatmul { shape: BatchMatmulShape },
    #[serde(rename = "dense")]
    Dense { shape: DenseShape },
    #[serde(rename = "conv2d_nchw")]
    Conv2dNchw { shape: Conv2dShape },
    #[serde(rename = "conv2d_nhwc")]
    Conv2dNhwc { shape: Conv2dShape },
    #[serde(rename = "depthwise_conv2d_nchw")]
    DepthwiseConv2dNchw { shape: DepthwiseConv2dShape },
    /// A PrimFunc in TVMScript text (line endings normalised to `\n`, one final newline).
    #[serde(rename = "tvmscript")]
    Tvmscript { tvmscript: String },
    /// A stage of a whole-model run (extract tasks, compile the tuned model).
    /// Made by the master, never read from a workload file.
    #[serde(rename = "model")]
    Model { model: Box<ModelStage> },
}

impl Op {
    /// The `op` name as written in YAML and on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Matmul { .. } => "matmul",
            Op::BatchMatmul { .. } => "batch_matmul",
            Op::Dense { .. } => "dense",
            Op::Conv2dNchw { .. } => "conv2d_nchw",
            Op::Conv2dNhwc { .. } => "conv2d_nhwc",
            Op::DepthwiseConv2dNchw { .. } => "depthwise_conv2d_nchw",
            Op::Tvmscript { .. } => "tvmscript",
            Op::Model { .. } => "model",
        }
    }

    /// Element counts of the operands, `(role, elements)`; `None` for tvmscript
    /// and for convolutions with an empty output.
    pub fn tensor_elements(&self) -> Option<Vec<(&'static str, u128)>> {
        let p = |xs: &[u64]| {
            xs.iter()
                .fold(1u128, |acc, &x| acc.saturating_mul(u128::from(x)))
        };
        let u = u64::from;
        Some(match self {
            Op::Matmul { shape: s } => vec![
                ("A", p(&[u(s.m), u(s.k)])),
                ("B", p(&[u(s.k), u(s.n)])),
                ("output", p(&[u(s.m), u(s.n)])),
            ],
            Op::BatchMatmul { shape: s } => vec![
                ("A", p(&[u(s.batch), u(s.m), u(s.k)])),
                ("B", p(&[u(s.batch), u(s.k), u(s.n)])),
                ("output", p(&[u(s.batch), u(s.m), u(s.n)])),
            ],
            Op::Dense { shape: s } => vec![
                ("input", p(&[u(s.batch), u(s.in_features)])),
                ("weight", p(&[u(s.out_features), u(s.in_features)])),
                ("output", p(&[u(s.batch), u(s.out_features)])),
            ],
            Op::Conv2dNchw { shape: s } | Op::Conv2dNhwc { shape: s } => {
                let [oh, ow] = s.output_size()?;
                vec![
                    (
                        "input",
                        p(&[u(s.batch), u(s.in_channels), u(s.height), u(s.width)]),
                    ),
                    (
                        "weight",
                        p(&[
                            u(s.out_channels),
                            u(s.in_channels),
                            u(s.kernel[0]),
                            u(s.kernel[1]),
                        ]),
                    ),
                    ("output", p(&[u(s.batch), u(s.out_channels), oh, ow])),
                ]
            }
            Op::DepthwiseConv2dNchw { shape: s } => {
                let [oh, ow] = s.output_size()?;
                vec![
                    (
                        "input",
                        p(&[u(s.batch), u(s.channels), u(s.height), u(s.width)]),
                    ),
                    (
                        "weight",
                        p(&[s.out_channels(), u(s.kernel[0]), u(s.kernel[1])]),
                    ),
                    ("output", p(&[u(s.batch), s.out_channels(), oh, ow])),
                ]
            }
            Op::Tvmscript { .. } | Op::Model { .. } => return None,
        })
    }
}

/// One tuning workload, normalised (defaults filled in, pairs expanded).
///
/// Wire form (serde JSON), flat:
/// `{"name":"mm128","op":"matmul","shape":{"m":128,"n":128,"k":128},"dtype":"float32","target":{"kind":"llvm"},"trials":64}`
/// or `{"name":"f","op":"tvmscript","tvmscript":"...","dtype":"float32","target":{...},"trials":64}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Workload {
    pub name: String,
    #[serde(flatten)]
    pub op: Op,
    pub dtype: String,
    pub target: Target,
    pub trials: u32,
    /// MetaSchedule settings for this workload (`tuner:` in the file, over the
    /// file's top-level `tuner:`); absent when all are the worker's defaults,
    /// so the identity of a workload without them is unchanged.
    #[serde(default, skip_serializing_if = "TunerSettings::is_default")]
    pub tuner: TunerSettings,
}

/// Prefix of the hashed identity text; bump if the identity rule ever changes.
const IDENTITY_VERSION: &str = "tunefleet-workload-v1\n";

/// 16 hex digits of the SHA-256 of `prefix` and `value` as canonical JSON.
fn hash_id(prefix: &str, value: &Value) -> String {
    let mut hasher = Sha256::new();
    hasher.update(prefix.as_bytes());
    write_canonical_json(value, &mut HashSink(&mut hasher));
    hex::encode(&hasher.finalize()[..8])
}

fn content_key_of(mut identity: Value) -> String {
    if let Value::Object(map) = &mut identity {
        for field in ["trials", "target", "tuner"] {
            map.remove(field);
        }
    }
    hash_id("tunefleet-content-v1\n", &identity)
}

impl Workload {
    /// Stable job identity: 16 hex digits of the SHA-256 of [`Self::identity_json`]
    /// (see the module docs). The name is not part of it.
    pub fn job_id(&self) -> String {
        hash_id(IDENTITY_VERSION, &self.identity_value())
    }

    /// The normalised content the job id is computed from: the wire form without
    /// `name`, as JSON with every object's keys sorted and no whitespace.
    pub fn identity_json(&self) -> String {
        let mut out = Vec::new();
        write_canonical_json(&self.identity_value(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    fn identity_value(&self) -> Value {
        let mut value = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut value {
            map.remove("name");
        }
        value
    }

    /// What the tuning cache keys records by: the computation alone (the
    /// identity without `trials`, `target` and `tuner`), as 16 hex digits.
    /// The target is matched separately, against the *effective* target a
    /// result was measured for; the budget decides hit or warm start.
    pub fn content_key(&self) -> String {
        content_key_of(self.identity_value())
    }

    /// [`Self::job_id`] and [`Self::content_key`] from one identity value:
    /// what a submit needs of each workload, at half the cost.
    pub fn job_id_and_content_key(&self) -> (String, String) {
        let identity = self.identity_value();
        (
            hash_id(IDENTITY_VERSION, &identity),
            content_key_of(identity),
        )
    }

    /// Floating point operations of one run (a multiply-add counts as 2);
    /// `None` for tvmscript.
    pub fn flops(&self) -> Option<f64> {
        let f = f64::from;
        match &self.op {
            Op::Matmul { shape: s } => Some(2.0 * f(s.m) * f(s.n) * f(s.k)),
            Op::BatchMatmul { shape: s } => Some(2.0 * f(s.batch) * f(s.m) * f(s.n) * f(s.k)),
            Op::Dense { shape: s } => Some(2.0 * f(s.batch) * f(s.in_features) * f(s.out_features)),
            Op::Conv2dNchw { shape: s } | Op::Conv2dNhwc { shape: s } => {
                let [oh, ow] = s.output_size()?;
                Some(
                    2.0 * f(s.batch)
                        * f(s.out_channels)
                        * oh as f64
                        * ow as f64
                        * f(s.in_channels)
                        * f(s.kernel[0])
                        * f(s.kernel[1]),
                )
            }
            Op::DepthwiseConv2dNchw { shape: s } => {
                let [oh, ow] = s.output_size()?;
                Some(
                    2.0 * f(s.batch)
                        * s.out_channels() as f64
                        * oh as f64
                        * ow as f64
                        * f(s.kernel[0])
                        * f(s.kernel[1]),
                )
            }
            Op::Tvmscript { .. } | Op::Model { .. } => None,
        }
    }

    /// `"matmul"`, `"conv2d_nchw"`, ..., `"tvmscript"`.
    pub fn op_name(&self) -> &'static str {
        self.op.name()
    }

    /// Short human text: `m=128 n=128 k=128`, `1x64x56x56 k3x3 s1x1 p1x1 d1x1 -> 64`
    /// (the input in the op's layout, then kernel, stride, padding, dilation and
    /// output channels), `tvmscript main (12 lines)`.
    pub fn shape_summary(&self) -> String {
        let conv =
            |input: [u32; 4], k: [u32; 2], s: [u32; 2], p: [u32; 2], d: [u32; 2], out: u64| {
                format!(
                    "{}x{}x{}x{} k{}x{} s{}x{} p{}x{} d{}x{} -> {}",
                    input[0],
                    input[1],
                    input[2],
                    input[3],
                    k[0],
                    k[1],
                    s[0],
                    s[1],
                    p[0],
                    p[1],
                    d[0],
                    d[1],
                    out
                )
            };
        match &self.op {
            Op::Matmul { shape: s } => format!("m={} n={} k={}", s.m, s.n, s.k),
            Op::BatchMatmul { shape: s } => {
                format!("batch={} m={} n={} k={}", s.batch, s.m, s.n, s.k)
            }
            Op::Dense { shape: s } => format!(
                "batch={} in={} out={}",
                s.batch, s.in_features, s.out_features
            ),
            Op::Conv2dNchw { shape: s } => conv(
                [s.batch, s.in_channels, s.height, s.width],
                s.kernel,
                s.stride,
                s.padding,
                s.dilation,
                u64::from(s.out_channels),
            ),
            Op::Conv2dNhwc { shape: s } => conv(
                [s.batch, s.height, s.width, s.in_channels],
                s.kernel,
                s.stride,
                s.padding,
                s.dilation,
                u64::from(s.out_channels),
            ),
            Op::DepthwiseConv2dNchw { shape: s } => conv(
                [s.batch, s.channels, s.height, s.width],
                s.kernel,
                s.stride,
                s.padding,
                s.dilation,
                s.out_channels(),
            ),
            Op::Model { model } => format!("model {} `{}`", model.name(), model.run()),
            Op::Tvmscript { tvmscript } => {
                let lines = tvmscript.lines().count();
                match tvmscript_function_name(tvmscript) {
                    Some(name) => format!("tvmscript {name} ({lines} lines)"),
                    None => format!("tvmscript ({lines} lines)"),
                }
            }
        }
    }

    /// Re-checks a workload that did not come from [`parse_workload_file`] (e.g.
    /// one received over the wire) against the same rules. Errors have an empty
    /// `file`, no line, and fields relative to the workload (`shape.m`).
    pub fn validate(&self) -> Result<(), WorkloadErrors> {
        let mut problems: Vec<(String, String)> = Vec::new();
        if self.name.trim() != self.name {
            problems.push((
                "name".into(),
                "must not start or end with whitespace".into(),
            ));
        }
        if let Err(m) = check_name(&self.name) {
            problems.push(("name".into(), m));
        }
        if let Err(m) = check_dtype(&self.dtype) {
            problems.push(("dtype".into(), m));
        }
        if !(1..=MAX_TRIALS).contains(&self.trials) {
            problems.push((
                "trials".into(),
                format!("must be between 1 and {MAX_TRIALS}, got {}", self.trials),
            ));
        }
        for (field, message) in self.tuner.problems() {
            problems.push((format!("tuner.{field}"), message));
        }
        for (field, min, value) in op_numbers(&self.op) {
            if let Err(m) = check_range(i128::from(value), min) {
                problems.push((format!("shape.{field}"), m));
            }
        }
        match &self.op {
            Op::Tvmscript { tvmscript } => {
                if let Err(m) = check_tvmscript(tvmscript) {
                    problems.push(("tvmscript".into(), m));
                }
            }
            Op::Model { .. } => {}
            op => {
                if problems.is_empty() {
                    for (sub, m) in geometry_problems(op) {
                        problems.push((join_field("shape", sub.unwrap_or("")), m));
                    }
                }
            }
        }
        if problems.is_empty() {
            return Ok(());
        }
        Err(WorkloadErrors {
            errors: problems
                .into_iter()
                .map(|(field, message)| WorkloadError {
                    file: String::new(),
                    line: None,
                    column: None,
                    field: Some(field),
                    message,
                })
                .collect(),
        })
    }
}

fn tvmscript_function_name(text: &str) -> Option<&str> {
    text.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix("def ")?;
        let name = rest.split('(').next()?.trim();
        let ok = !name.is_empty()
            && name.len() <= 64
            && name.chars().all(|c| c.is_alphanumeric() || c == '_');
        ok.then_some(name)
    })
}

/// Compact JSON with every object's keys sorted, independent of serde_json's
/// map implementation (`preserve_order` may be switched on by another crate).
/// Written straight into `out` (a hasher, for ids): a submit computes two of
/// these per workload on the core thread.
fn write_canonical_json(value: &Value, out: &mut impl std::io::Write) {
    // Writing to a Vec or a hasher cannot fail, and serde_json writes a string
    // or a scalar `Value` without error.
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            let _ = out.write_all(b"{");
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    let _ = out.write_all(b",");
                }
                let _ = serde_json::to_writer(&mut *out, key);
                let _ = out.write_all(b":");
                if let Some(v) = map.get(key) {
                    write_canonical_json(v, out);
                }
            }
            let _ = out.write_all(b"}");
        }
        Value::Array(items) => {
            let _ = out.write_all(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    let _ = out.write_all(b",");
                }
                write_canonical_json(item, out);
            }
            let _ = out.write_all(b"]");
        }
        scalar => {
            let _ = serde_json::to_writer(&mut *out, scalar);
        }
    }
}

/// Feeds written bytes to a SHA-256, so an identity is hashed without first
/// being built as a string.
struct HashSink<'a>(&'a mut Sha256);

impl std::io::Write for HashSink<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// One problem in a workload file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[error("{}", Shown(self))]
pub struct WorkloadError {
    /// The file name given to [`parse_workload_file`].
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
struct Shown<'a>(&'a WorkloadError);
struct ShownAll<'a>(&'a WorkloadErrors);

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

fn fmt_workload_error(e: &WorkloadError, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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

fn fmt_workload_errors(e: &WorkloadErrors, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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

// ---------------------------------------------------------------------------
// Checks shared by the YAML path and `Workload::validate`
// ---------------------------------------------------------------------------

fn check_name(name: &str) -> Result<(), String> {
    let chars = name.chars().count();
    if name.trim().is_empty() {
        Err("must not be empty".into())
    } else if chars > MAX_NAME_CHARS {
        Err(format!(
            "must be at most {MAX_NAME_CHARS} characters, got {chars}"
        ))
    } else if name.chars().any(char::is_control) {
        Err("must not contain control characters (tabs, newlines, ...)".into())
    } else {
        Ok(())
    }
}

fn check_dtype(dtype: &str) -> Result<(), String> {
    if DTYPES.contains(&dtype) {
        return Ok(());
    }
    Err(format!(
        "unknown dtype {}{} (supported: {})",
        quote_text(dtype),
        did_you_mean(dtype, &DTYPES),
        DTYPES.join(", ")
    ))
}

/// `min` is 1 for sizes, strides and dilations, 0 for padding.
fn check_range(value: i128, min: u32) -> Result<u32, String> {
    if value < i128::from(min) {
        let what = if min == 0 {
            "a non-negative integer"
        } else {
            "a positive integer"
        };
        return Err(format!("must be {what}, got {value}"));
    }
    if value > i128::from(MAX_DIM) {
        return Err(format!("must be at most {MAX_DIM}, got {value}"));
    }
    u32::try_from(value).map_err(|_| format!("must be at most {MAX_DIM}, got {value}"))
}

fn check_tvmscript(text: &str) -> Result<(), String> {
    if text.trim().is_empty() {
        return Err(
            "must not be empty: give a PrimFunc in TVMScript (`tvmscript: |` followed by the indented code)"
                .into(),
        );
    }
    if text.len() > MAX_TVMSCRIPT_BYTES {
        return Err(format!(
            "is {} bytes; the limit is {MAX_TVMSCRIPT_BYTES}",
            text.len()
        ));
    }
    if !text.contains("prim_func") {
        return Err("must define a PrimFunc (a `def` decorated with `@T.prim_func`)".into());
    }
    Ok(())
}

fn normalise_tvmscript(text: &str) -> String {
    let mut out = text.replace("\r\n", "\n").trim_end().to_string();
    out.push('\n');
    out
}

/// `(field, minimum, value)` for every number of a shape, pairs as `kernel[0]`...
fn op_numbers(op: &Op) -> Vec<(String, u32, u32)> {
    let mut out = Vec::new();
    let mut dim = |name: &str, v: u32| out.push((name.to_string(), 1, v));
    match op {
        Op::Matmul { shape: s } => {
            dim("m", s.m);
            dim("n", s.n);
            dim("k", s.k);
        }
        Op::BatchMatmul { shape: s } => {
            dim("batch", s.batch);
            dim("m", s.m);
            dim("n", s.n);
            dim("k", s.k);
        }
        Op::Dense { shape: s } => {
            dim("batch", s.batch);
            dim("in_features", s.in_features);
            dim("out_features", s.out_features);
        }
        Op::Conv2dNchw { shape: s } | Op::Conv2dNhwc { shape: s } => {
            dim("batch", s.batch);
            dim("in_channels", s.in_channels);
            dim("height", s.height);
            dim("width", s.width);
            dim("out_channels", s.out_channels);
            push_pairs(&mut out, s.kernel, s.stride, s.padding, s.dilation);
        }
        Op::DepthwiseConv2dNchw { shape: s } => {
            dim("batch", s.batch);
            dim("channels", s.channels);
            dim("height", s.height);
            dim("width", s.width);
            dim("multiplier", s.multiplier);
            push_pairs(&mut out, s.kernel, s.stride, s.padding, s.dilation);
        }
        Op::Tvmscript { .. } | Op::Model { .. } => {}
    }
    out
}

fn push_pairs(
    out: &mut Vec<(String, u32, u32)>,
    kernel: [u32; 2],
    stride: [u32; 2],
    padding: [u32; 2],
    dilation: [u32; 2],
) {
    for (name, min, pair) in [
        ("kernel", 1, kernel),
        ("stride", 1, stride),
        ("padding", 0, padding),
        ("dilation", 1, dilation),
    ] {
        for (i, v) in pair.into_iter().enumerate() {
            out.push((format!("{name}[{i}]"), min, v));
        }
    }
}

/// Whole-shape problems (empty convolution output, absurd tensor sizes), assuming
/// every number is already in range. `(sub-field of shape, message)`.
fn geometry_problems(op: &Op) -> Vec<(Option<&'static str>, String)> {
    let mut out = Vec::new();
    let conv = match op {
        Op::Conv2dNchw { shape: s } | Op::Conv2dNhwc { shape: s } => Some((
            [s.height, s.width],
            s.kernel,
            s.stride,
            s.padding,
            s.dilation,
        )),
        Op::DepthwiseConv2dNchw { shape: s } => Some((
            [s.height, s.width],
            s.kernel,
            s.stride,
            s.padding,
            s.dilation,
        )),
        _ => None,
    };
    if let Some((input, kernel, stride, padding, dilation)) = conv {
        let mut empty = Vec::new();
        for (axis, name) in [(0, "height"), (1, "width")] {
            if conv_axis(
                input[axis],
                kernel[axis],
                stride[axis],
                padding[axis],
                dilation[axis],
            )
            .is_none()
            {
                let effective =
                    u64::from(dilation[axis]) * u64::from(kernel[axis].saturating_sub(1)) + 1;
                empty.push((name, effective, axis));
            }
        }
        if !empty.is_empty() {
            let names: Vec<&str> = empty.iter().map(|(name, _, _)| *name).collect();
            let details: Vec<String> = empty
                .iter()
                .map(|&(name, effective, axis)| {
                    format!(
                        "the kernel spans {effective} (kernel {}, dilation {}) but the padded \
                         input {name} is only {} ({name} {} + 2 * padding {})",
                        kernel[axis],
                        dilation[axis],
                        u64::from(input[axis]) + 2 * u64::from(padding[axis]),
                        input[axis],
                        padding[axis],
                    )
                })
                .collect();
            out.push((
                Some("kernel"),
                format!(
                    "the output {} would be empty: {}",
                    names.join(" and "),
                    details.join("; ")
                ),
            ));
            return out;
        }
    }
    for (role, elements) in op.tensor_elements().unwrap_or_default() {
        if elements > u128::from(MAX_TENSOR_ELEMENTS) {
            out.push((
                None,
                format!(
                    "the {role} tensor would have {elements} elements; the limit is \
                     {MAX_TENSOR_ELEMENTS} (2^34)"
                ),
            ));
        }
    }
    out
}

/// How a value is shown in "got ..." messages.
fn describe(node: &Node) -> String {
    match &node.value {
        Yaml::Null => "an empty value".into(),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Int(i) => i.to_string(),
        Yaml::Float(x) => format!("{x:?}"),
        Yaml::Str(s) => quote_text(s),
        Yaml::Seq(items) => format!("a list of {} item(s)", items.len()),
        Yaml::Map(_) => "a mapping".into(),
    }
}

/// Characters of user text quoted in this parser's messages.
const QUOTE_CHARS: usize = 40;

/// `"text"` with escapes, shortened to about 40 characters.
fn quote_text(s: &str) -> String {
    quote_at_most(s, QUOTE_CHARS)
}

/// `"text"` with escapes, shortened to `max` characters.
pub(crate) fn quote_at_most(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        format!("{s:?}")
    } else {
        let short: String = s.chars().take(max).collect();
        format!("{short:?}…")
    }
}

/// A map key as it appears in a field path.
fn key_for_path(key: &str) -> String {
    path_key(key, QUOTE_CHARS)
}

/// A map key as it appears in a field path: bare when simple, else quoted
/// (shortened to `max` characters).
pub(crate) fn path_key(key: &str, max: usize) -> String {
    let simple = !key.is_empty()
        && key.len() <= 64
        && key
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
    if simple {
        key.to_string()
    } else {
        quote_at_most(key, max)
    }
}

fn join_field(path: &str, key: &str) -> String {
    match (path.is_empty(), key.is_empty()) {
        (true, _) => key.to_string(),
        (false, true) => path.to_string(),
        (false, false) => format!("{path}.{key}"),
    }
}

/// Optimal string alignment distance (a transposition counts as one edit).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev2: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(prev2[j - 2] + 1);
            }
            cur[j] = best;
        }
        std::mem::swap(&mut prev2, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

fn suggest<'c>(word: &str, candidates: &[&'c str]) -> Option<&'c str> {
    if word.is_empty() || word.len() > 64 {
        return None;
    }
    let lower = word.to_lowercase();
    let limit = match word.chars().count() {
        0..=2 => 0,
        3..=4 => 1,
        _ => 2,
    };
    candidates
        .iter()
        .map(|c| (edit_distance(&lower, c), *c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn did_you_mean(word: &str, candidates: &[&str]) -> String {
    suggest(word, candidates)
        .map(|s| format!("; did you mean `{s}`?"))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

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

    fn count(&self) -> usize {
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
struct Fields<'a> {
    known: Vec<(&'static str, &'a Node, &'a Node)>,
    /// Known keys that an unknown key looked like (so "missing" is not reported too).
    suggested: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    fn get(&self, key: &str) -> Option<&'a Node> {
        self.known
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, _, v)| *v)
    }

    fn key_node(&self, key: &str) -> Option<&'a Node> {
        self.known
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, k, _)| *k)
    }

    fn was_suggested(&self, key: &str) -> bool {
        self.suggested.contains(&key)
    }
}

fn read_fields<'a>(
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

/// A file-level default as seen by the workloads.
enum Inherited<T> {
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

struct Defaults {
    target: Inherited<Target>,
    trials: Inherited<u32>,
    dtype: Inherited<String>,
    tuner: Inherited<TunerSettings>,
}

#[derive(Default)]
struct FileState {
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

fn report_yaml_error(ctx: &mut Ctx<'_>, err: &serde_saphyr::Error) {
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
    let mut message: String = default_message(inner)
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect();
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
fn yaml_limit_message(mut err: &serde_saphyr::Error) -> Option<String> {
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
fn default_message(err: &serde_saphyr::Error) -> String {
    use serde_saphyr::MessageFormatter;
    serde_saphyr::DefaultMessageFormatter
        .format_message(err)
        .into_owned()
}

fn parse_document(ctx: &mut Ctx<'_>, state: &mut FileState, doc: &Node) {
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

fn parse_workload(
    ctx: &mut Ctx<'_>,
    state: &mut FileState,
    defaults: &Defaults,
    path: &str,
    item: &Node,
) -> Option<Workload> {
    let entries = match &item.value {
        Yaml::Map(entries) => entries,
        _ => {
            let msg = format!(
                "each workload must be a mapping with `name`, `op` and `shape` \
                 (or `tvmscript`), got {}",
                describe(item)
            );
            ctx.at(item, path, msg);
            return None;
        }
    };
    let errors_before = ctx.count();
    let fields = read_fields(ctx, entries, path, &WORKLOAD_KEYS);
    let f = |key: &str| join_field(path, key);

    let name = match fields.get("name") {
        Some(node) => parse_name(ctx, node, &f("name")),
        None => {
            if !fields.was_suggested("name") {
                ctx.at(item, &f("name"), "missing `name`".into());
            }
            None
        }
    };
    let dtype = match (fields.get("dtype"), &defaults.dtype) {
        (Some(node), _) => parse_dtype(ctx, node, &f("dtype")),
        (None, Inherited::Value(d)) => Some(d.clone()),
        (None, Inherited::Missing) => Some(DEFAULT_DTYPE.to_string()),
        (None, Inherited::Invalid) => None,
    };
    let trials = match (fields.get("trials"), &defaults.trials) {
        (Some(node), _) => parse_trials(ctx, node, &f("trials")),
        (None, Inherited::Value(t)) => Some(*t),
        (None, Inherited::Missing) => Some(DEFAULT_TRIALS),
        (None, Inherited::Invalid) => None,
    };
    let target = match (fields.get("target"), &defaults.target) {
        (Some(node), _) => parse_target(ctx, node, &f("target")),
        (None, Inherited::Value(t)) => Some(t.clone()),
        (None, Inherited::Invalid) => None,
        (None, Inherited::Missing) => {
            if !fields.was_suggested("target") {
                ctx.at(
                    item,
                    &f("target"),
                    "missing `target`: give one on this workload or at the top of the file \
                     (e.g. `target: {kind: llvm, num-cores: 2}`)"
                        .into(),
                );
            }
            None
        }
    };
    let tuner = match (fields.get("tuner"), &defaults.tuner) {
        (Some(node), Inherited::Value(base)) => {
            parse_tuner(ctx, node, &f("tuner")).map(|t| t.over(base))
        }
        (Some(node), _) => parse_tuner(ctx, node, &f("tuner")),
        (None, Inherited::Value(base)) => Some(base.clone()),
        (None, Inherited::Missing) => Some(TunerSettings::default()),
        (None, Inherited::Invalid) => None,
    };
    let op = parse_op(ctx, &fields, path, item);

    // Names are claimed even when the workload has other errors, so a later
    // duplicate is still reported.
    let name = name.and_then(|name| match state.names.get(&name) {
        Some(first) => {
            let where_ = first
                .map(|l| format!(" (first used at line {l})"))
                .unwrap_or_default();
            let node = fields.get("name").unwrap_or(item);
            ctx.at(
                node,
                &f("name"),
                format!("duplicate name {}{where_}", quote_text(&name)),
            );
            None
        }
        None => {
            let line = fields.key_node("name").and_then(Node::line);
            state.names.insert(name.clone(), line);
            Some(name)
        }
    });

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

/// `tuner: {strategy: evolutionary, cost_model: xgb, trials_per_round: 16,
/// builder_timeout_s: 30, runner_timeout_s: 30, number: 1, repeat: 3}`.
fn parse_tuner(ctx: &mut Ctx<'_>, node: &Node, field: &str) -> Option<TunerSettings> {
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
    };
    for (key, message) in tuner.problems() {
        let at = fields.get(key).unwrap_or(node);
        ctx.at(at, &join_field(field, key), message);
    }
    (ctx.count() == errors_before).then_some(tuner)
}

fn parse_name(ctx: &mut Ctx<'_>, node: &Node, field: &str) -> Option<String> {
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

fn parse_dtype(ctx: &mut Ctx<'_>, node: &Node, field: &str) -> Option<String> {
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

fn parse_trials(ctx: &mut Ctx<'_>, node: &Node, field: &str) -> Option<u32> {
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

fn parse_target(ctx: &mut Ctx<'_>, node: &Node, field: &str) -> Option<Target> {
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

fn yaml_to_json(node: &Node) -> Result<Value, String> {
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Matmul,
    BatchMatmul,
    Dense,
    Conv2dNchw,
    Conv2dNhwc,
    DepthwiseConv2dNchw,
}

impl OpKind {
    fn name(self) -> &'static str {
        match self {
            OpKind::Matmul => "matmul",
            OpKind::BatchMatmul => "batch_matmul",
            OpKind::Dense => "dense",
            OpKind::Conv2dNchw => "conv2d_nchw",
            OpKind::Conv2dNhwc => "conv2d_nhwc",
            OpKind::DepthwiseConv2dNchw => "depthwise_conv2d_nchw",
        }
    }

    fn parse(name: &str) -> Option<OpKind> {
        Some(match name {
            "matmul" => OpKind::Matmul,
            "batch_matmul" => OpKind::BatchMatmul,
            "dense" => OpKind::Dense,
            "conv2d_nchw" => OpKind::Conv2dNchw,
            "conv2d_nhwc" => OpKind::Conv2dNhwc,
            "depthwise_conv2d_nchw" => OpKind::DepthwiseConv2dNchw,
            _ => return None,
        })
    }

    fn shape_keys(self) -> &'static [&'static str] {
        match self {
            OpKind::Matmul => &["m", "n", "k"],
            OpKind::BatchMatmul => &["batch", "m", "n", "k"],
            OpKind::Dense => &["batch", "in_features", "out_features"],
            OpKind::Conv2dNchw | OpKind::Conv2dNhwc => &[
                "batch",
                "in_channels",
                "height",
                "width",
                "out_channels",
                "kernel",
                "stride",
                "padding",
                "dilation",
            ],
            OpKind::DepthwiseConv2dNchw => &[
                "batch",
                "channels",
                "height",
                "width",
                "multiplier",
                "kernel",
                "stride",
                "padding",
                "dilation",
            ],
        }
    }

    fn example(self) -> &'static str {
        match self {
            OpKind::Matmul => "{m: 128, n: 128, k: 128}",
            OpKind::BatchMatmul => "{batch: 8, m: 128, n: 128, k: 64}",
            OpKind::Dense => "{batch: 1, in_features: 256, out_features: 128}",
            OpKind::Conv2dNchw | OpKind::Conv2dNhwc => {
                "{batch: 1, in_channels: 64, height: 56, width: 56, out_channels: 64, kernel: 3, \
                 stride: 1, padding: 1}"
            }
            OpKind::DepthwiseConv2dNchw => {
                "{batch: 1, channels: 32, height: 112, width: 112, multiplier: 1, kernel: 3, \
                 stride: 1, padding: 1}"
            }
        }
    }
}

fn parse_op(ctx: &mut Ctx<'_>, fields: &Fields<'_>, path: &str, item: &Node) -> Option<Op> {
    let op_field = join_field(path, "op");
    let op_name = match fields.get("op") {
        None => None,
        Some(node) => match node.as_str() {
            Some(s) => Some((s.trim(), node)),
            None => {
                let msg = format!(
                    "must be the name of an operator (one of: {}), got {}",
                    OPS.join(", "),
                    describe(node)
                );
                ctx.at(node, &op_field, msg);
                return None;
            }
        },
    };
    match op_name {
        None if fields.get("tvmscript").is_some() => parse_tvmscript_op(ctx, fields, path, item),
        None => {
            if !fields.was_suggested("op") && !fields.was_suggested("tvmscript") {
                ctx.at(
                    item,
                    &op_field,
                    format!(
                        "missing `op` (one of: {}), or give a PrimFunc as `tvmscript:`",
                        OPS.join(", ")
                    ),
                );
            }
            None
        }
        Some(("tvmscript", _)) => parse_tvmscript_op(ctx, fields, path, item),
        Some((name, node)) => {
            let Some(kind) = OpKind::parse(name) else {
                ctx.at(
                    node,
                    &op_field,
                    format!(
                        "unknown op {}{} (valid ops: {})",
                        quote_text(name),
                        did_you_mean(name, &OPS),
                        OPS.join(", ")
                    ),
                );
                return None;
            };
            if let Some(key) = fields.key_node("tvmscript") {
                ctx.at(
                    key,
                    &join_field(path, "tvmscript"),
                    format!(
                        "cannot be combined with `op: {name}`: give either `op` + `shape` \
                         or `tvmscript`"
                    ),
                );
            }
            parse_shape(ctx, kind, fields, path, item)
        }
    }
}

fn parse_tvmscript_op(
    ctx: &mut Ctx<'_>,
    fields: &Fields<'_>,
    path: &str,
    item: &Node,
) -> Option<Op> {
    let field = join_field(path, "tvmscript");
    if let Some(key) = fields.key_node("shape") {
        ctx.at(
            key,
            &join_field(path, "shape"),
            "is not used by a tvmscript workload (the PrimFunc defines its own shapes); \
             remove it"
                .into(),
        );
    }
    let Some(node) = fields.get("tvmscript") else {
        if !fields.was_suggested("tvmscript") {
            ctx.at(
                item,
                &field,
                "missing `tvmscript:` (the PrimFunc as TVMScript text) for `op: tvmscript`".into(),
            );
        }
        return None;
    };
    let text = match &node.value {
        Yaml::Str(s) => s,
        Yaml::Null => "",
        _ => {
            let msg = format!(
                "must be TVMScript text (use a block string: `tvmscript: |`), got {}",
                describe(node)
            );
            ctx.at(node, &field, msg);
            return None;
        }
    };
    match check_tvmscript(text) {
        Ok(()) => Some(Op::Tvmscript {
            tvmscript: normalise_tvmscript(text),
        }),
        Err(m) => {
            ctx.at(node, &field, m);
            None
        }
    }
}

/// Reads the numbers of one `shape:` mapping, reporting every problem.
struct ShapeReader<'r, 'c, 'a> {
    ctx: &'r mut Ctx<'c>,
    fields: Fields<'a>,
    shape: &'a Node,
    path: String,
    kind: OpKind,
}

impl ShapeReader<'_, '_, '_> {
    fn number(&mut self, node: &Node, field: &str, min: u32) -> Option<u32> {
        let result = match &node.value {
            Yaml::Int(v) => check_range(*v, min),
            _ => Err(format!(
                "must be {}, got {}",
                if min == 0 {
                    "a non-negative integer"
                } else {
                    "a positive integer"
                },
                describe(node)
            )),
        };
        match result {
            Ok(v) => Some(v),
            Err(m) => {
                self.ctx.at(node, field, m);
                None
            }
        }
    }

    fn missing(&mut self, key: &str, what: &str) {
        if self.fields.was_suggested(key) {
            return;
        }
        let field = join_field(&self.path, key);
        let msg = format!(
            "missing `{key}` ({what}); op {} needs {}",
            self.kind.name(),
            self.kind.example()
        );
        self.ctx.at(self.shape, &field, msg);
    }

    fn dim(&mut self, key: &str) -> Option<u32> {
        match self.fields.get(key) {
            Some(node) => self.number(node, &join_field(&self.path, key), 1),
            None => {
                self.missing(key, "a positive integer");
                None
            }
        }
    }

    fn pair(&mut self, key: &str, default: Option<[u32; 2]>, min: u32) -> Option<[u32; 2]> {
        let field = join_field(&self.path, key);
        let Some(node) = self.fields.get(key) else {
            if default.is_none() {
                self.missing(key, "an integer or [height, width]");
            }
            return default;
        };
        match &node.value {
            Yaml::Int(_) => self.number(node, &field, min).map(|v| [v, v]),
            Yaml::Seq(items) => match items.as_slice() {
                [h, w] => {
                    let h = self.number(h, &format!("{field}[0]"), min);
                    let w = self.number(w, &format!("{field}[1]"), min);
                    Some([h?, w?])
                }
                _ => {
                    let msg = format!(
                        "must be one integer or a list of two integers [height, width], got {}",
                        describe(node)
                    );
                    self.ctx.at(node, &field, msg);
                    None
                }
            },
            _ => {
                let msg = format!(
                    "must be one integer or a list of two integers [height, width], got {}",
                    describe(node)
                );
                self.ctx.at(node, &field, msg);
                None
            }
        }
    }

    fn conv_pairs(&mut self) -> Option<[[u32; 2]; 4]> {
        let kernel = self.pair("kernel", None, 1);
        let stride = self.pair("stride", Some([1, 1]), 1);
        let padding = self.pair("padding", Some([0, 0]), 0);
        let dilation = self.pair("dilation", Some([1, 1]), 1);
        Some([kernel?, stride?, padding?, dilation?])
    }
}

fn parse_shape(
    ctx: &mut Ctx<'_>,
    kind: OpKind,
    fields: &Fields<'_>,
    path: &str,
    item: &Node,
) -> Option<Op> {
    let shape_path = join_field(path, "shape");
    let Some(shape) = fields.get("shape") else {
        if !fields.was_suggested("shape") {
            ctx.at(
                item,
                &shape_path,
                format!(
                    "missing `shape` for op {}: e.g. shape: {}",
                    kind.name(),
                    kind.example()
                ),
            );
        }
        return None;
    };
    let Yaml::Map(entries) = &shape.value else {
        let msg = format!(
            "must be a mapping like {}, got {}",
            kind.example(),
            describe(shape)
        );
        ctx.at(shape, &shape_path, msg);
        return None;
    };
    let shape_fields = read_fields(ctx, entries, &shape_path, kind.shape_keys());
    let mut r = ShapeReader {
        ctx,
        fields: shape_fields,
        shape,
        path: shape_path,
        kind,
    };
    let op = match kind {
        OpKind::Matmul => {
            let (m, n, k) = (r.dim("m"), r.dim("n"), r.dim("k"));
            Op::Matmul {
                shape: MatmulShape {
                    m: m?,
                    n: n?,
                    k: k?,
                },
            }
        }
        OpKind::BatchMatmul => {
            let (batch, m, n, k) = (r.dim("batch"), r.dim("m"), r.dim("n"), r.dim("k"));
            Op::BatchMatmul {
                shape: BatchMatmulShape {
                    batch: batch?,
                    m: m?,
                    n: n?,
                    k: k?,
                },
            }
        }
        OpKind::Dense => {
            let batch = r.dim("batch");
            let in_features = r.dim("in_features");
            let out_features = r.dim("out_features");
            Op::Dense {
                shape: DenseShape {
                    batch: batch?,
                    in_features: in_features?,
                    out_features: out_features?,
                },
            }
        }
        OpKind::Conv2dNchw | OpKind::Conv2dNhwc => {
            let batch = r.dim("batch");
            let in_channels = r.dim("in_channels");
            let height = r.dim("height");
            let width = r.dim("width");
            let out_channels = r.dim("out_channels");
            let [kernel, stride, padding, dilation] = r.conv_pairs()?;
            let shape = Conv2dShape {
                batch: batch?,
                in_channels: in_channels?,
                height: height?,
                width: width?,
                out_channels: out_channels?,
                kernel,
                stride,
                padding,
                dilation,
            };
            if kind == OpKind::Conv2dNchw {
                Op::Conv2dNchw { shape }
            } else {
                Op::Conv2dNhwc { shape }
            }
        }
        OpKind::DepthwiseConv2dNchw => {
            let batch = r.dim("batch");
            let channels = r.dim("channels");
            let height = r.dim("height");
            let width = r.dim("width");
            let multiplier = r.dim("multiplier");
            let [kernel, stride, padding, dilation] = r.conv_pairs()?;
            Op::DepthwiseConv2dNchw {
                shape: DepthwiseConv2dShape {
                    batch: batch?,
                    channels: channels?,
                    height: height?,
                    width: width?,
                    multiplier: multiplier?,
                    kernel,
                    stride,
                    padding,
                    dilation,
                },
            }
        }
    };
    let problems = geometry_problems(&op);
    if problems.is_empty() {
        return Some(op);
    }
    for (sub, message) in problems {
        let node = sub.and_then(|s| r.fields.get(s)).unwrap_or(shape);
        r.ctx
            .at(node, &join_field(&r.path, sub.unwrap_or("")), message);
    }
    None
}

#[cfg(test)]
mod tests;
