//! Reading and slimming ONNX models without an ONNX or protobuf library.
//!
//! Users can hand tunefleet a whole model (`.onnx`) instead of single workloads.
//! Before anything is queued, the CLI and the web app show what is in it
//! ([`summarize`]), check that every input has a concrete shape
//! ([`check_inputs`], fed by `--input-shape` via [`parse_input_shape`]) and send
//! a copy without its weights ([`strip_weights`]): tuning depends on operators
//! and shapes, never on weight values, and the weights are nearly all of a
//! model's size — hundreds of megabytes that would otherwise travel to the master
//! and to every worker.
//!
//! # Why a hand-written reader
//!
//! Only a handful of ONNX fields matter here, and this crate is also compiled to
//! wasm for the web app, where a protobuf runtime plus the generated ONNX types
//! would be most of the bundle. The protobuf wire format is small: a field is a
//! varint tag (field number and wire type) followed by a varint, 8 bytes, a
//! length-prefixed payload or 4 bytes. So this module reads it directly, using the
//! field numbers of `onnx.proto`. Fields it does not know are skipped when reading
//! and copied byte for byte when rewriting, so a model from a newer exporter keeps
//! everything it had.
//!
//! # Untrusted input
//!
//! Models come from uploads, so nothing here panics, and memory stays a small
//! multiple of the input: every length is checked against the bytes left; groups
//! (wire types 3 and 4, never used by ONNX) and invalid wire types are errors; a
//! known field with the wrong wire type is an error; subgraphs (the bodies of
//! `If`, `Loop` and `Scan`) nest at most [`MAX_GRAPH_DEPTH`] deep; and what is
//! kept per item is bounded ([`MAX_GRAPH_VALUES`] inputs and outputs of the main
//! graph, [`MAX_RANK`] dimensions each, [`MAX_OP_TYPES`] distinct operators).
//! Everything else is counted, not stored. A file that is not a model — a JPEG,
//! a YAML workload file, a PyTorch checkpoint — fails with "not an ONNX model",
//! and says what it looks like instead when the first bytes tell.
//!
//! # What the summary counts
//!
//! - `inputs` are the main graph's inputs minus its initializers (before IR
//!   version 4 every weight was listed as a graph input too).
//! - `nodes`, `op_types`, `initializers` and `initializer_bytes` cover the main
//!   graph and all its subgraphs. `initializer_bytes` is the tensor data stored in
//!   the file (`raw_data` and the typed `*_data` fields, as encoded), so it drops
//!   to almost nothing after [`strip_weights`]; data in external files is not
//!   counted (see `external_data`).
//! - Operators outside the default domain are named `domain.OpType`
//!   (`com.microsoft.FusedConv`), as the ONNX operator docs write them.
//!
//! # Stripping
//!
//! [`strip_weights`] empties floating-point initializers (float, double,
//! float16, bfloat16, float8, float4, complex) with more than `min_elements`
//! elements, in the main graph and in subgraphs. Integer initializers stay: they
//! are typically shapes, axes or indices that shape inference needs. A stripped
//! tensor keeps its name, `data_type`, `dims` and unknown fields and loses its
//! data fields and any external-data reference, so it is easy to recognise: a
//! tensor with elements but no data field. `onnx.load` reads such a model, but
//! `onnx.checker.check_model` and every runtime refuse it ("should contain one
//! and only one value field") until values are filled in: whoever runs it fills
//! those tensors first (zeros or random values do for tuning). No placeholder
//! data is written on purpose: data of the wrong size would satisfy the checker
//! and then fail later, further from the cause. Weights held in `Constant` nodes
//! and sparse initializers are left as they are. Only the removed fields and the length prefixes of the
//! messages around them change; every other byte is copied as is.
//!
//! # Code
//!
//! Here: the public types and the entry points. `wire.rs` reads the protobuf
//! wire format and names the fields; `read.rs` walks a model, `strip.rs`
//! removes weights; `supported.rs` lists the operators TVM's importer takes.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod read;
mod strip;
pub mod supported;
#[cfg(test)]
mod tests;
mod wire;

use read::read_model;
use strip::{apply_edits, Stripper};

/// Subgraphs (attributes of `If`, `Loop`, `Scan`, ...) may nest this deep.
pub const MAX_GRAPH_DEPTH: usize = 32;
/// At most this many inputs, and this many outputs, in the main graph.
pub const MAX_GRAPH_VALUES: usize = 100_000;
/// At most this many dimensions for a graph input or output.
pub const MAX_RANK: usize = 64;
/// At most this many distinct operator types in one model.
pub const MAX_OP_TYPES: usize = 10_000;
/// `ir_version` values above this are taken as a sign of junk, not a model
/// (ONNX was at IR version 11 in 2025 and adds about one a year).
pub(super) const MAX_IR_VERSION: i64 = 100;
/// Largest field number protobuf allows.
pub(super) const MAX_FIELD_NUMBER: u64 = (1 << 29) - 1;

// ---------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------

/// What [`summarize`] found in a model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
pub struct OnnxSummary {
    pub ir_version: i64,
    /// `(domain, version)` of each `opset_import`; the default domain is `""`.
    pub opsets: Vec<(String, i64)>,
    pub producer_name: String,
    pub producer_version: String,
    pub graph_name: String,
    /// Inputs of the main graph that are not initializers, in model order.
    pub inputs: Vec<ValueInfo>,
    /// Outputs of the main graph, in model order.
    pub outputs: Vec<ValueInfo>,
    /// Operator type (`domain.OpType` outside the default domain) → number of
    /// nodes, subgraphs included.
    pub op_types: BTreeMap<String, usize>,
    /// Nodes in the main graph and all subgraphs.
    pub nodes: usize,
    /// Initializers (dense and sparse) in the main graph and all subgraphs.
    pub initializers: usize,
    /// Tensor data of those initializers stored in the file, in bytes as encoded.
    pub initializer_bytes: u64,
    /// Initializers whose data lives in a separate file (ONNX external data).
    pub external_data: usize,
}

/// A graph input or output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
pub struct ValueInfo {
    pub name: String,
    /// ONNX `TensorProto.DataType` (1 = float32, 7 = int64, ...; see
    /// [`elem_type_name`]); 0 when unknown or when the value is not a tensor.
    pub elem_type: i32,
    /// The dimensions, when `rank_known`.
    pub dims: Vec<Dim>,
    /// False when the model gives no shape at all (unknown rank, or not a tensor).
    pub rank_known: bool,
}

impl ValueInfo {
    /// A shape to suggest for `--input-shape`: the fixed dims as they are,
    /// each dynamic or unknown one as 1 (`1,3,224,224`).
    pub fn example_shape(&self) -> String {
        let dims: Vec<String> = self
            .dims
            .iter()
            .map(|d| match d {
                Dim::Fixed(v) if *v > 0 => v.to_string(),
                _ => "1".to_string(),
            })
            .collect();
        dims.join(",")
    }
}

/// One dimension of a graph input or output. Serialized as a number, a string
/// or `null`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[serde(untagged)]
pub enum Dim {
    /// `dim_value`.
    Fixed(i64),
    /// `dim_param`: a symbolic size such as `N` or `batch_size`.
    Named(String),
    /// Neither is set.
    Unknown,
}

/// What [`strip_weights`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
pub struct StripReport {
    /// Initializers whose data was removed.
    pub tensors: usize,
    /// Tensor data removed, in bytes as encoded (tags and length prefixes not counted).
    pub bytes_removed: u64,
    /// Size of the model before and after.
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// Why a model was refused, or why `--input-shape` does not fit it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OnnxError {
    /// The bytes are not protobuf, or not shaped like an ONNX model, at `offset`.
    #[error("not an ONNX model: {reason} at byte {offset}")]
    Malformed { offset: usize, reason: String },
    /// Not a model, with nothing useful to point at (empty, text, another format).
    #[error("not an ONNX model: {0}")]
    NotOnnx(String),
    #[error("the model has no graph")]
    NoGraph,
    /// Operators TVM's ONNX importer has no converter for.
    #[error("unsupported ONNX operator(s): {} (TVM's Relax ONNX importer cannot convert them)", .0.join(", "))]
    UnsupportedOps(Vec<String>),
    #[error("the model is beyond tunefleet's limits: {what} at byte {offset}")]
    Limit { offset: usize, what: String },
    #[error(
        "external data is not supported: initializer `{name}` keeps its data in `{location}`, \
         a separate file, and is not a large floating-point weight that stripping drops; save the \
         model with its data inside the .onnx file (onnx.save_model(model, path, save_as_external_data=False))"
    )]
    ExternalData { name: String, location: String },
    #[error(
        "input `{input}` has a dynamic dimension (dim {index} = `{param}`); \
         pass --input-shape {input}={example} (with your sizes)"
    )]
    DynamicDim {
        input: String,
        index: usize,
        param: String,
        example: String,
    },
    #[error(
        "input `{input}` has a dimension of unknown size (dim {index}); \
         pass --input-shape {input}={example} (with your sizes)"
    )]
    UnknownDim {
        input: String,
        index: usize,
        example: String,
    },
    #[error(
        "input `{input}` has no shape in the model; pass --input-shape {input}=D0,D1,... with its full shape"
    )]
    NoShape { input: String },
    #[error(
        "--input-shape gives {given} dimensions for `{input}`, but the model input has {model}"
    )]
    RankMismatch {
        input: String,
        model: usize,
        given: usize,
    },
    #[error("--input-shape gives {given} for dim {index} of `{input}`, but the model fixes it to {model}")]
    DimMismatch {
        input: String,
        index: usize,
        model: i64,
        given: i64,
    },
    #[error("--input-shape names `{name}`, which is not a model input (inputs: {inputs})")]
    UnknownInput { name: String, inputs: String },
    #[error("--input-shape is given twice for `{0}`")]
    DuplicateInputShape(String),
    #[error("--input-shape `{arg}`: {reason} (expected NAME=D0,D1,..., e.g. data=1,3,224,224)")]
    BadInputShape { arg: String, reason: String },
}

/// The name of an ONNX tensor element type, in the spelling of the workload
/// format's dtypes where one exists (`float32`, `int64`, ...).
pub fn elem_type_name(elem_type: i32) -> Option<&'static str> {
    Some(match elem_type {
        1 => "float32",
        2 => "uint8",
        3 => "int8",
        4 => "uint16",
        5 => "int16",
        6 => "int32",
        7 => "int64",
        8 => "string",
        9 => "bool",
        10 => "float16",
        11 => "float64",
        12 => "uint32",
        13 => "uint64",
        14 => "complex64",
        15 => "complex128",
        16 => "bfloat16",
        17 => "float8e4m3fn",
        18 => "float8e4m3fnuz",
        19 => "float8e5m2",
        20 => "float8e5m2fnuz",
        21 => "uint4",
        22 => "int4",
        23 => "float4e2m1",
        24 => "float8e8m0",
        _ => return None,
    })
}

/// Floating-point element types: the ones [`strip_weights`] may empty.
pub(super) fn is_floating(data_type: i32) -> bool {
    matches!(
        data_type,
        1 | 10 | 11 | 14 | 15 | 16 | 17 | 18 | 19 | 20 | 23 | 24
    )
}

// ---------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------

/// Reads a serialized `ModelProto`. Fails with [`OnnxError::Malformed`] or
/// [`OnnxError::NotOnnx`] for anything that is not one (or is cut short),
/// [`OnnxError::NoGraph`] for a model without a graph and [`OnnxError::Limit`]
/// past the module's limits.
pub fn summarize(bytes: &[u8]) -> Result<OnnxSummary, OnnxError> {
    read_model(bytes).map_err(|e| match e {
        OnnxError::Malformed { .. } | OnnxError::NotOnnx(_) | OnnxError::NoGraph => {
            sniff(bytes).map_or(e, OnnxError::NotOnnx)
        }
        other => other,
    })
}

/// Drops the data of floating-point initializers with more than `min_elements`
/// elements (they keep name, dims and data_type; `raw_data`, the typed data
/// fields and external-data references go) and copies every other byte verbatim,
/// unknown fields included. Returns the new model and what was stripped.
///
/// The model is first checked as by [`summarize`], with the same errors. An
/// initializer that keeps external data (not floating-point, or small) is an
/// [`OnnxError::ExternalData`]: the result would not be self-contained.
pub fn strip_weights(bytes: &[u8], min_elements: u64) -> Result<(Vec<u8>, StripReport), OnnxError> {
    summarize(bytes)?;
    let mut report = StripReport {
        bytes_before: bytes.len() as u64,
        ..StripReport::default()
    };
    let mut edits = Vec::new();
    let mut strip = Stripper {
        min_elements,
        report: &mut report,
        edits: &mut edits,
    };
    strip.model(bytes)?;
    let out = apply_edits(bytes, &mut edits)?;
    report.bytes_after = out.len() as u64;
    Ok((out, report))
}

/// Checks that every input of `summary` has a concrete shape once `shapes`
/// (input name → dims, from `--input-shape`) is applied, and returns each input's
/// final shape in model order. A given shape must match the model's rank and
/// fixed dimensions; dims that are `dim_param`s, unknown or not positive must be
/// given. Errors name the input and the dimension.
pub fn check_inputs(
    summary: &OnnxSummary,
    shapes: &BTreeMap<String, Vec<i64>>,
) -> Result<Vec<(String, Vec<i64>)>, OnnxError> {
    for name in shapes.keys() {
        if !summary.inputs.iter().any(|i| &i.name == name) {
            let inputs = if summary.inputs.is_empty() {
                "the model has none".to_string()
            } else {
                let names: Vec<String> = summary.inputs.iter().map(|i| shown(&i.name)).collect();
                names.join(", ")
            };
            return Err(OnnxError::UnknownInput {
                name: shown(name),
                inputs,
            });
        }
    }
    let mut resolved = Vec::with_capacity(summary.inputs.len());
    for input in &summary.inputs {
        let name = shown(&input.name);
        if let Some(given) = shapes.get(&input.name) {
            if input.rank_known && given.len() != input.dims.len() {
                return Err(OnnxError::RankMismatch {
                    input: name,
                    model: input.dims.len(),
                    given: given.len(),
                });
            }
            for (index, &size) in given.iter().enumerate() {
                if size < 1 {
                    return Err(OnnxError::BadInputShape {
                        arg: name,
                        reason: format!("dim {index} is {size}; sizes must be at least 1"),
                    });
                }
                if let Some(&Dim::Fixed(model)) = input.dims.get(index) {
                    if input.rank_known && model > 0 && model != size {
                        return Err(OnnxError::DimMismatch {
                            input: name,
                            index,
                            model,
                            given: size,
                        });
                    }
                }
            }
            resolved.push((input.name.clone(), given.clone()));
            continue;
        }
        if !input.rank_known {
            return Err(OnnxError::NoShape { input: name });
        }
        let example = || input.example_shape();
        let mut shape = Vec::with_capacity(input.dims.len());
        for (index, dim) in input.dims.iter().enumerate() {
            match dim {
                Dim::Fixed(v) if *v > 0 => shape.push(*v),
                Dim::Fixed(v) => {
                    return Err(OnnxError::DynamicDim {
                        input: name,
                        index,
                        param: v.to_string(),
                        example: example(),
                    })
                }
                Dim::Named(param) => {
                    return Err(OnnxError::DynamicDim {
                        input: name,
                        index,
                        param: shown(param),
                        example: example(),
                    })
                }
                Dim::Unknown => {
                    return Err(OnnxError::UnknownDim {
                        input: name,
                        index,
                        example: example(),
                    })
                }
            }
        }
        resolved.push((input.name.clone(), shape));
    }
    Ok(resolved)
}

/// Parses one `--input-shape` value, `NAME=D0,D1,...` (e.g. `data=1,3,224,224`;
/// `NAME=` is a scalar). The name is everything before the last `=`, so names
/// containing `=` or `,` work. Sizes must be integers of at least 1.
pub fn parse_input_shape(arg: &str) -> Result<(String, Vec<i64>), OnnxError> {
    let bad = |reason: String| OnnxError::BadInputShape {
        arg: shown(arg),
        reason,
    };
    let Some((name, dims)) = arg.rsplit_once('=') else {
        return Err(bad("there is no `=`".to_string()));
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(bad("the input name before `=` is empty".to_string()));
    }
    let dims = dims.trim();
    if dims.is_empty() {
        return Ok((name.to_string(), Vec::new()));
    }
    let mut shape = Vec::new();
    for part in dims.split(',') {
        let part = part.trim();
        let size: i64 = part
            .parse()
            .map_err(|_| bad(format!("`{}` is not a whole number", shown(part))))?;
        if size < 1 {
            return Err(bad(format!("size {size} must be at least 1")));
        }
        if shape.len() == MAX_RANK {
            return Err(bad(format!("more than {MAX_RANK} dimensions")));
        }
        shape.push(size);
    }
    Ok((name.to_string(), shape))
}

/// Parses several `--input-shape` values into the map [`check_inputs`] takes;
/// naming an input twice is an error.
pub fn parse_input_shapes<'a>(
    args: impl IntoIterator<Item = &'a str>,
) -> Result<BTreeMap<String, Vec<i64>>, OnnxError> {
    let mut shapes = BTreeMap::new();
    for arg in args {
        let (name, dims) = parse_input_shape(arg)?;
        if shapes.contains_key(&name) {
            return Err(OnnxError::DuplicateInputShape(shown(&name)));
        }
        shapes.insert(name, dims);
    }
    Ok(shapes)
}

/// A name from the model or the command line, made safe to print in one line of
/// an error: control characters escaped, long names cut.
pub(super) fn shown(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == 200 {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// What a non-model file looks like, from its first bytes, when that is clear.
fn sniff(bytes: &[u8]) -> Option<String> {
    if bytes.is_empty() {
        return Some("the file is empty".to_string());
    }
    const FORMATS: &[(&[u8], &str)] = &[
        (b"\xff\xd8\xff", "a JPEG image"),
        (b"\x89PNG", "a PNG image"),
        (b"GIF8", "a GIF image"),
        (
            b"PK\x03\x04",
            "a ZIP archive (PyTorch .pt/.pth files are; export the model with torch.onnx.export first)",
        ),
        (b"\x1f\x8b", "gzip-compressed (decompress it first)"),
        (b"\x93NUMPY", "a NumPy array"),
        (b"\x7fELF", "an executable"),
        (b"%PDF", "a PDF document"),
    ];
    for (magic, what) in FORMATS {
        if bytes.starts_with(magic) {
            return Some(format!("the file is {what}"));
        }
    }
    let head = bytes.get(..bytes.len().min(256)).unwrap_or(bytes);
    let texty = |b: &u8| b.is_ascii_graphic() || matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    if head.iter().all(texty) {
        let text = String::from_utf8_lossy(head);
        let first = text.trim_start().lines().next().unwrap_or("");
        let first: String = first.chars().take(40).collect();
        let hint = if first.starts_with("ir_version") {
            " (an ONNX text-format model? save it in the binary format)"
        } else {
            ", not a binary protobuf"
        };
        return Some(format!("the file is text (it starts with `{first}`){hint}"));
    }
    None
}

/// Refuses a model with operators TVM cannot import, naming all of them.
pub fn check_ops(summary: &OnnxSummary) -> Result<(), OnnxError> {
    let unsupported = supported::unsupported_ops(summary.op_types.keys());
    if unsupported.is_empty() {
        Ok(())
    } else {
        Err(OnnxError::UnsupportedOps(unsupported))
    }
}
