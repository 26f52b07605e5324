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
//!
//! # Code
//!
//! Here: the types, the limits and the identity. The file reader is
//! `parse.rs` (documents, defaults, each workload's fields) with `ops.rs`
//! (each op and its `shape:`) and `ctx.rs` (located diagnostics and key
//! checks, shared by every YAML reader); the checks it shares with
//! [`Workload::validate`] (and the wording of their errors) are `checks.rs`,
//! the located errors `errors.rs`.

use crate::model::{ModelStage, TunerSettings};
use crate::target::Target;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

mod checks;
mod ctx;
mod errors;
mod ops;
mod parse;
#[cfg(test)]
mod tests;

use checks::{check_dtype, check_name, check_tvmscript, geometry_problems, join_field, op_numbers};
pub(crate) use checks::{check_range, escape_controls, path_key, quote_at_most};
pub(crate) use ctx::Ctx;
pub use errors::{WorkloadError, WorkloadErrors};
pub use parse::parse_workload_file;
#[cfg(any(test, feature = "testing"))]
pub(crate) use parse::MAX_YAML_DOCUMENTS;

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

pub(super) fn conv_axis(
    input: u32,
    kernel: u32,
    stride: u32,
    pad: u32,
    dilation: u32,
) -> Option<u64> {
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
