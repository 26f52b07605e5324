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

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

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
const MAX_IR_VERSION: i64 = 100;
/// Largest field number protobuf allows.
const MAX_FIELD_NUMBER: u64 = (1 << 29) - 1;

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
fn is_floating(data_type: i32) -> bool {
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
fn shown(s: &str) -> String {
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

// ---------------------------------------------------------------------------
// Protobuf wire format
// ---------------------------------------------------------------------------

const WIRE_VARINT: u8 = 0;
const WIRE_I64: u8 = 1;
const WIRE_LEN: u8 = 2;
const WIRE_I32: u8 = 5;

/// Masks of the wire types a known field may use (`1 << wire type`).
const V: u8 = 1 << WIRE_VARINT;
const F64: u8 = 1 << WIRE_I64;
const L: u8 = 1 << WIRE_LEN;
const F32: u8 = 1 << WIRE_I32;

fn wire_name(wire: u8) -> &'static str {
    match wire {
        WIRE_VARINT => "varint",
        WIRE_I64 => "64-bit",
        WIRE_LEN => "length-delimited",
        WIRE_I32 => "32-bit",
        _ => "invalid",
    }
}

fn expected_wires(mask: u8) -> String {
    let names: Vec<&str> = [WIRE_VARINT, WIRE_I64, WIRE_LEN, WIRE_I32]
        .into_iter()
        .filter(|w| mask & (1 << w) != 0)
        .map(wire_name)
        .collect();
    names.join(" or ")
}

#[derive(Clone, Copy, Debug)]
enum Payload<'a> {
    Varint(u64),
    I64,
    Len(&'a [u8]),
    I32,
}

/// One field of a message, with offsets into the whole model.
#[derive(Clone, Copy, Debug)]
struct Field<'a> {
    number: u32,
    wire: u8,
    /// The whole field as encoded: tag, length prefix if any, payload.
    raw: &'a [u8],
    /// Length of the tag within `raw`.
    tag_len: usize,
    /// Offset of the tag in the model.
    at: usize,
    /// Offset of the payload (after any length prefix) in the model.
    payload_at: usize,
    payload: Payload<'a>,
}

impl Field<'_> {
    /// Bytes of payload, as encoded (without tag or length prefix).
    fn payload_len(&self) -> u64 {
        match self.payload {
            Payload::Varint(_) => self.raw.len().saturating_sub(self.tag_len) as u64,
            Payload::I64 => 8,
            Payload::Len(b) => b.len() as u64,
            Payload::I32 => 4,
        }
    }
}

fn read_varint(data: &[u8], pos: usize) -> Result<(u64, usize), &'static str> {
    let mut value = 0u64;
    for i in 0..10 {
        let Some(&b) = data.get(pos + i) else {
            return Err("a varint runs past the end (the data is cut short?)");
        };
        if i == 9 && b > 1 {
            return Err("a varint is longer than 64 bits");
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok((value, pos + i + 1));
        }
    }
    Err("a varint is longer than 64 bits")
}

/// Iterates over the fields of one message.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    /// Offset of `data` in the model, for error positions.
    base: usize,
    /// Message type, for error messages.
    msg: &'static str,
}

fn malformed(offset: usize, reason: String) -> OnnxError {
    OnnxError::Malformed { offset, reason }
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8], base: usize, msg: &'static str) -> Self {
        Reader {
            data,
            pos: 0,
            base,
            msg,
        }
    }

    /// The next field; `None` at the end of the message.
    fn next(&mut self) -> Result<Option<Field<'a>>, OnnxError> {
        let data = self.data;
        let start = self.pos;
        if start >= data.len() {
            return Ok(None);
        }
        let at = self.base + start;
        let msg = self.msg;
        let (key, p) = read_varint(data, start)
            .map_err(|why| malformed(at, format!("bad field tag in {msg}: {why}")))?;
        let number = key >> 3;
        let wire = (key & 7) as u8;
        if number == 0 || number > MAX_FIELD_NUMBER {
            return Err(malformed(
                at,
                format!("invalid field number {number} in {msg}"),
            ));
        }
        let number = number as u32;
        let (payload, payload_at, end) = match wire {
            WIRE_VARINT => {
                let (v, end) = read_varint(data, p)
                    .map_err(|why| malformed(at, format!("field {number} of {msg}: {why}")))?;
                (Payload::Varint(v), p, end)
            }
            WIRE_I64 | WIRE_I32 => {
                let width = if wire == WIRE_I64 { 8 } else { 4 };
                if data.get(p..p + width).is_none() {
                    return Err(malformed(
                        at,
                        format!(
                            "field {number} of {msg} runs past the end (the data is cut short?)"
                        ),
                    ));
                }
                let payload = if wire == WIRE_I64 {
                    Payload::I64
                } else {
                    Payload::I32
                };
                (payload, p, p + width)
            }
            WIRE_LEN => {
                let (len, q) = read_varint(data, p).map_err(|why| {
                    malformed(at, format!("length of field {number} of {msg}: {why}"))
                })?;
                let left = data.len() - q.min(data.len());
                let body = usize::try_from(len)
                    .ok()
                    .filter(|&n| n <= left)
                    .and_then(|n| data.get(q..q + n));
                let Some(body) = body else {
                    return Err(malformed(
                        at,
                        format!(
                            "field {number} of {msg} claims {len} bytes but only {left} remain \
                             (the data is cut short?)"
                        ),
                    ));
                };
                (Payload::Len(body), q, q + body.len())
            }
            3 | 4 => {
                return Err(malformed(
                    at,
                    format!(
                    "field {number} of {msg} is a group (wire type {wire}), which ONNX never uses"
                ),
                ))
            }
            _ => {
                return Err(malformed(
                    at,
                    format!("field {number} of {msg} has invalid wire type {wire}"),
                ))
            }
        };
        self.pos = end;
        Ok(Some(Field {
            number,
            wire,
            raw: data.get(start..end).unwrap_or_default(),
            tag_len: p - start,
            at,
            payload_at: self.base + payload_at,
            payload,
        }))
    }

    /// The next field, with its wire type checked against `known`
    /// (`(number, name, allowed wire types)`) when it is listed there.
    fn next_known(&mut self, known: &[(u32, &str, u8)]) -> Result<Option<Field<'a>>, OnnxError> {
        let Some(f) = self.next()? else {
            return Ok(None);
        };
        if let Some(&(_, name, mask)) = known.iter().find(|k| k.0 == f.number) {
            if mask & (1 << f.wire) == 0 {
                return Err(malformed(
                    f.at,
                    format!(
                        "field {} ({name}) of {} has wire type {} ({}), expected {}",
                        f.number,
                        self.msg,
                        f.wire,
                        wire_name(f.wire),
                        expected_wires(mask)
                    ),
                ));
            }
        }
        Ok(Some(f))
    }
}

fn utf8(bytes: &[u8], at: usize, what: &str) -> Result<String, OnnxError> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| malformed(at, format!("{what} is not valid UTF-8")))
}

/// Calls `each` with every varint of a packed repeated field.
fn packed_varints(
    bytes: &[u8],
    at: usize,
    what: &str,
    mut each: impl FnMut(u64),
) -> Result<(), OnnxError> {
    let mut pos = 0;
    while pos < bytes.len() {
        let (v, next) =
            read_varint(bytes, pos).map_err(|why| malformed(at + pos, format!("{what}: {why}")))?;
        each(v);
        pos = next;
    }
    Ok(())
}

// Field numbers and wire types from onnx.proto, for the messages read here.
// Listed fields that are not read are still checked for their wire type: junk
// that happens to parse as protobuf rarely gets those right.

const MODEL: &[(u32, &str, u8)] = &[
    (1, "ir_version", V),
    (2, "producer_name", L),
    (3, "producer_version", L),
    (4, "domain", L),
    (5, "model_version", V),
    (6, "doc_string", L),
    (7, "graph", L),
    (8, "opset_import", L),
    (14, "metadata_props", L),
    (20, "training_info", L),
    (25, "functions", L),
    (26, "configuration", L),
];
const OPSET: &[(u32, &str, u8)] = &[(1, "domain", L), (2, "version", V)];
const GRAPH: &[(u32, &str, u8)] = &[
    (1, "node", L),
    (2, "name", L),
    (5, "initializer", L),
    (10, "doc_string", L),
    (11, "input", L),
    (12, "output", L),
    (13, "value_info", L),
    (14, "quantization_annotation", L),
    (15, "sparse_initializer", L),
    (16, "metadata_props", L),
];
const NODE: &[(u32, &str, u8)] = &[
    (1, "input", L),
    (2, "output", L),
    (3, "name", L),
    (4, "op_type", L),
    (5, "attribute", L),
    (6, "doc_string", L),
    (7, "domain", L),
    (8, "overload", L),
    (9, "metadata_props", L),
    (10, "device_configurations", L),
];
const ATTRIBUTE: &[(u32, &str, u8)] = &[
    (1, "name", L),
    (2, "f", F32),
    (3, "i", V),
    (4, "s", L),
    (5, "t", L),
    (6, "g", L),
    (7, "floats", F32 | L),
    (8, "ints", V | L),
    (9, "strings", L),
    (10, "tensors", L),
    (11, "graphs", L),
    (13, "doc_string", L),
    (14, "tp", L),
    (15, "type_protos", L),
    (20, "type", V),
    (21, "ref_attr_name", L),
    (22, "sparse_tensor", L),
    (23, "sparse_tensors", L),
];
const TENSOR: &[(u32, &str, u8)] = &[
    (1, "dims", V | L),
    (2, "data_type", V),
    (3, "segment", L),
    (4, "float_data", F32 | L),
    (5, "int32_data", V | L),
    (6, "string_data", L),
    (7, "int64_data", V | L),
    (8, "name", L),
    (9, "raw_data", L),
    (10, "double_data", F64 | L),
    (11, "uint64_data", V | L),
    (12, "doc_string", L),
    (13, "external_data", L),
    (14, "data_location", V),
    (16, "metadata_props", L),
];
/// TensorProto fields that hold (or point to) the data: what stripping removes.
const TENSOR_DATA_FIELDS: [u32; 7] = [4, 5, 6, 7, 9, 10, 11];
const TENSOR_EXTERNAL_FIELDS: [u32; 2] = [13, 14];
const SPARSE_TENSOR: &[(u32, &str, u8)] =
    &[(1, "values", L), (2, "indices", L), (3, "dims", V | L)];
const STRING_ENTRY: &[(u32, &str, u8)] = &[(1, "key", L), (2, "value", L)];
const VALUE_INFO: &[(u32, &str, u8)] = &[
    (1, "name", L),
    (2, "type", L),
    (3, "doc_string", L),
    (4, "metadata_props", L),
];
const TYPE: &[(u32, &str, u8)] = &[
    (1, "tensor_type", L),
    (4, "sequence_type", L),
    (5, "map_type", L),
    (6, "denotation", L),
    (8, "sparse_tensor_type", L),
    (9, "optional_type", L),
];
const TYPE_TENSOR: &[(u32, &str, u8)] = &[(1, "elem_type", V), (2, "shape", L)];
const SHAPE: &[(u32, &str, u8)] = &[(1, "dim", L)];
const DIMENSION: &[(u32, &str, u8)] = &[
    (1, "dim_value", V),
    (2, "dim_param", L),
    (3, "denotation", L),
];

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

/// Counts over the main graph and all subgraphs.
#[derive(Default)]
struct Totals {
    nodes: usize,
    op_types: BTreeMap<String, usize>,
    initializers: usize,
    initializer_bytes: u64,
    external_data: usize,
}

/// What the main graph contributes besides the counts.
#[derive(Default)]
struct MainGraph {
    name: String,
    inputs: Vec<ValueInfo>,
    outputs: Vec<ValueInfo>,
}

fn read_model(bytes: &[u8]) -> Result<OnnxSummary, OnnxError> {
    if bytes.is_empty() {
        return Err(OnnxError::NotOnnx("the file is empty".to_string()));
    }
    let mut reader = Reader::new(bytes, 0, "ModelProto");
    let mut ir_version = None;
    let mut opsets = Vec::new();
    let mut producer_name = String::new();
    let mut producer_version = String::new();
    let mut graph: Option<MainGraph> = None;
    let mut totals = Totals::default();
    while let Some(f) = reader.next_known(MODEL)? {
        match (f.number, f.payload) {
            (1, Payload::Varint(v)) => {
                let v = v as i64;
                if !(1..=MAX_IR_VERSION).contains(&v) {
                    return Err(malformed(
                        f.at,
                        format!("ir_version {v} is not an ONNX IR version"),
                    ));
                }
                ir_version = Some(v);
            }
            (2, Payload::Len(b)) => producer_name = utf8(b, f.payload_at, "producer_name")?,
            (3, Payload::Len(b)) => producer_version = utf8(b, f.payload_at, "producer_version")?,
            (7, Payload::Len(b)) => {
                if graph.is_some() {
                    return Err(malformed(
                        f.at,
                        "a second graph in the ModelProto".to_string(),
                    ));
                }
                let mut main = MainGraph::default();
                read_graph(b, f.payload_at, 0, &mut totals, Some(&mut main))?;
                graph = Some(main);
            }
            (8, Payload::Len(b)) => opsets.push(read_opset(b, f.payload_at)?),
            _ => {}
        }
    }
    let (ir_version, graph) = match (ir_version, graph) {
        (Some(v), Some(g)) => (v, g),
        (None, None) => {
            return Err(OnnxError::NotOnnx(
                "it has neither an ir_version nor a graph".to_string(),
            ))
        }
        (Some(_), None) => return Err(OnnxError::NoGraph),
        (None, Some(_)) => {
            return Err(OnnxError::NotOnnx(
                "the model has no ir_version".to_string(),
            ))
        }
    };
    Ok(OnnxSummary {
        ir_version,
        opsets,
        producer_name,
        producer_version,
        graph_name: graph.name,
        inputs: graph.inputs,
        outputs: graph.outputs,
        op_types: totals.op_types,
        nodes: totals.nodes,
        initializers: totals.initializers,
        initializer_bytes: totals.initializer_bytes,
        external_data: totals.external_data,
    })
}

fn read_opset(data: &[u8], at: usize) -> Result<(String, i64), OnnxError> {
    let mut reader = Reader::new(data, at, "OperatorSetIdProto");
    let (mut domain, mut version) = (String::new(), 0);
    while let Some(f) = reader.next_known(OPSET)? {
        match (f.number, f.payload) {
            (1, Payload::Len(b)) => domain = utf8(b, f.payload_at, "opset domain")?,
            (2, Payload::Varint(v)) => version = v as i64,
            _ => {}
        }
    }
    Ok((domain, version))
}

/// Reads a graph at nesting `depth`, adding to `totals`; `main` is filled for the
/// main graph only (subgraphs' names, inputs and outputs are not kept).
fn read_graph(
    data: &[u8],
    at: usize,
    depth: usize,
    totals: &mut Totals,
    mut main: Option<&mut MainGraph>,
) -> Result<(), OnnxError> {
    if depth > MAX_GRAPH_DEPTH {
        return Err(OnnxError::Limit {
            offset: at,
            what: format!("subgraphs nested more than {MAX_GRAPH_DEPTH} deep"),
        });
    }
    let mut reader = Reader::new(data, at, "GraphProto");
    while let Some(f) = reader.next_known(GRAPH)? {
        let Payload::Len(b) = f.payload else { continue };
        match f.number {
            1 => read_node(b, f.payload_at, depth, totals)?,
            5 => {
                let t = read_tensor(b, f.payload_at)?;
                totals.initializers += 1;
                totals.initializer_bytes += t.data_bytes;
                totals.external_data += usize::from(t.external.is_some());
            }
            15 => {
                let (_, bytes, external) = read_sparse_tensor(b, f.payload_at)?;
                totals.initializers += 1;
                totals.initializer_bytes += bytes;
                totals.external_data += usize::from(external);
            }
            2 | 11 | 12 => {
                let Some(main) = main.as_deref_mut() else {
                    continue;
                };
                match f.number {
                    2 => main.name = utf8(b, f.payload_at, "graph name")?,
                    n => {
                        let (list, what) = if n == 11 {
                            (&mut main.inputs, "inputs")
                        } else {
                            (&mut main.outputs, "outputs")
                        };
                        if list.len() == MAX_GRAPH_VALUES {
                            return Err(OnnxError::Limit {
                                offset: f.at,
                                what: format!("more than {MAX_GRAPH_VALUES} graph {what}"),
                            });
                        }
                        list.push(read_value_info(b, f.payload_at)?);
                    }
                }
            }
            _ => {}
        }
    }
    // Inputs that are initializers are weights, not inputs. A second pass, so
    // that only initializer names that are also input names are kept in memory.
    if let Some(main) = main {
        if !main.inputs.is_empty() {
            let hidden = {
                let names: BTreeSet<&str> = main.inputs.iter().map(|i| i.name.as_str()).collect();
                let mut hidden = BTreeSet::new();
                let mut reader = Reader::new(data, at, "GraphProto");
                while let Some(f) = reader.next()? {
                    let name = match (f.number, f.payload) {
                        (5, Payload::Len(b)) => read_tensor(b, f.payload_at)?.name,
                        (15, Payload::Len(b)) => read_sparse_tensor(b, f.payload_at)?.0,
                        _ => continue,
                    };
                    if names.contains(name.as_str()) {
                        hidden.insert(name);
                    }
                }
                hidden
            };
            main.inputs.retain(|i| !hidden.contains(&i.name));
        }
    }
    Ok(())
}

fn read_node(data: &[u8], at: usize, depth: usize, totals: &mut Totals) -> Result<(), OnnxError> {
    let mut reader = Reader::new(data, at, "NodeProto");
    let (mut op_type, mut domain) = (String::new(), String::new());
    while let Some(f) = reader.next_known(NODE)? {
        match (f.number, f.payload) {
            (4, Payload::Len(b)) => op_type = utf8(b, f.payload_at, "op_type")?,
            (7, Payload::Len(b)) => domain = utf8(b, f.payload_at, "node domain")?,
            (5, Payload::Len(b)) => read_attribute(b, f.payload_at, depth, totals)?,
            _ => {}
        }
    }
    let key = if domain.is_empty() || domain == "ai.onnx" {
        op_type
    } else {
        format!("{domain}.{op_type}")
    };
    totals.nodes += 1;
    if let Some(count) = totals.op_types.get_mut(&key) {
        *count += 1;
    } else {
        if totals.op_types.len() == MAX_OP_TYPES {
            return Err(OnnxError::Limit {
                offset: at,
                what: format!("more than {MAX_OP_TYPES} distinct operator types"),
            });
        }
        totals.op_types.insert(key, 1);
    }
    Ok(())
}

fn read_attribute(
    data: &[u8],
    at: usize,
    depth: usize,
    totals: &mut Totals,
) -> Result<(), OnnxError> {
    let mut reader = Reader::new(data, at, "AttributeProto");
    while let Some(f) = reader.next_known(ATTRIBUTE)? {
        if let (6 | 11, Payload::Len(b)) = (f.number, f.payload) {
            read_graph(b, f.payload_at, depth + 1, totals, None)?;
        }
    }
    Ok(())
}

/// What the reader needs from a `TensorProto`.
struct TensorInfo {
    name: String,
    data_type: i32,
    /// Product of the dims (1 for a scalar), saturating; 0 if a dim is negative.
    elements: u64,
    /// Payload bytes of the data fields, as encoded.
    data_bytes: u64,
    /// `location` of external data, if the tensor has any.
    external: Option<String>,
}

fn read_tensor(data: &[u8], at: usize) -> Result<TensorInfo, OnnxError> {
    let mut reader = Reader::new(data, at, "TensorProto");
    let mut info = TensorInfo {
        name: String::new(),
        data_type: 0,
        elements: 1,
        data_bytes: 0,
        external: None,
    };
    let mut negative = false;
    let mut dim = |d: u64| {
        let d = d as i64;
        if d < 0 {
            negative = true;
        } else {
            info.elements = info.elements.saturating_mul(d as u64);
        }
    };
    let mut location = None;
    let mut external = false;
    let mut name = String::new();
    let mut data_type = 0;
    let mut data_bytes = 0u64;
    while let Some(f) = reader.next_known(TENSOR)? {
        match (f.number, f.payload) {
            (1, Payload::Varint(v)) => dim(v),
            (1, Payload::Len(b)) => packed_varints(b, f.payload_at, "tensor dims", &mut dim)?,
            (2, Payload::Varint(v)) => data_type = v as i32,
            (8, Payload::Len(b)) => name = utf8(b, f.payload_at, "tensor name")?,
            (13, Payload::Len(b)) => {
                external = true;
                if let (Some(key), value) = read_string_entry(b, f.payload_at)? {
                    if key == "location" {
                        location = Some(value);
                    }
                }
            }
            (14, Payload::Varint(v)) => external |= v == 1,
            (n, _) if TENSOR_DATA_FIELDS.contains(&n) => data_bytes += f.payload_len(),
            _ => {}
        }
    }
    info.name = name;
    info.data_type = data_type;
    info.data_bytes = data_bytes;
    if negative {
        info.elements = 0;
    }
    if external {
        info.external = Some(location.unwrap_or_else(|| "an unnamed file".to_string()));
    }
    Ok(info)
}

/// Name (of its values), stored data bytes and whether anything is external.
fn read_sparse_tensor(data: &[u8], at: usize) -> Result<(String, u64, bool), OnnxError> {
    let mut reader = Reader::new(data, at, "SparseTensorProto");
    let (mut name, mut bytes, mut external) = (String::new(), 0, false);
    while let Some(f) = reader.next_known(SPARSE_TENSOR)? {
        if let (1 | 2, Payload::Len(b)) = (f.number, f.payload) {
            let t = read_tensor(b, f.payload_at)?;
            bytes += t.data_bytes;
            external |= t.external.is_some();
            if f.number == 1 {
                name = t.name;
            }
        }
    }
    Ok((name, bytes, external))
}

fn read_string_entry(data: &[u8], at: usize) -> Result<(Option<String>, String), OnnxError> {
    let mut reader = Reader::new(data, at, "StringStringEntryProto");
    let (mut key, mut value) = (None, String::new());
    while let Some(f) = reader.next_known(STRING_ENTRY)? {
        match (f.number, f.payload) {
            (1, Payload::Len(b)) => key = Some(utf8(b, f.payload_at, "external_data key")?),
            (2, Payload::Len(b)) => value = utf8(b, f.payload_at, "external_data value")?,
            _ => {}
        }
    }
    Ok((key, value))
}

fn read_value_info(data: &[u8], at: usize) -> Result<ValueInfo, OnnxError> {
    let mut value = ValueInfo {
        name: String::new(),
        elem_type: 0,
        dims: Vec::new(),
        rank_known: false,
    };
    let mut reader = Reader::new(data, at, "ValueInfoProto");
    while let Some(f) = reader.next_known(VALUE_INFO)? {
        match (f.number, f.payload) {
            (1, Payload::Len(b)) => value.name = utf8(b, f.payload_at, "value name")?,
            (2, Payload::Len(b)) => {
                let mut types = Reader::new(b, f.payload_at, "TypeProto");
                while let Some(t) = types.next_known(TYPE)? {
                    if let (1, Payload::Len(tensor)) = (t.number, t.payload) {
                        read_tensor_type(tensor, t.payload_at, &mut value)?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(value)
}

fn read_tensor_type(data: &[u8], at: usize, value: &mut ValueInfo) -> Result<(), OnnxError> {
    let mut reader = Reader::new(data, at, "TypeProto.Tensor");
    while let Some(f) = reader.next_known(TYPE_TENSOR)? {
        match (f.number, f.payload) {
            (1, Payload::Varint(v)) => value.elem_type = v as i32,
            (2, Payload::Len(b)) => {
                value.rank_known = true;
                value.dims.clear();
                let mut shape = Reader::new(b, f.payload_at, "TensorShapeProto");
                while let Some(d) = shape.next_known(SHAPE)? {
                    if let (1, Payload::Len(dim)) = (d.number, d.payload) {
                        if value.dims.len() == MAX_RANK {
                            return Err(OnnxError::Limit {
                                offset: d.at,
                                what: format!(
                                    "`{}` has more than {MAX_RANK} dimensions",
                                    shown(&value.name)
                                ),
                            });
                        }
                        value.dims.push(read_dimension(dim, d.payload_at)?);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn read_dimension(data: &[u8], at: usize) -> Result<Dim, OnnxError> {
    let mut reader = Reader::new(data, at, "TensorShapeProto.Dimension");
    let mut dim = Dim::Unknown;
    while let Some(f) = reader.next_known(DIMENSION)? {
        match (f.number, f.payload) {
            (1, Payload::Varint(v)) => dim = Dim::Fixed(v as i64),
            (2, Payload::Len(b)) => {
                let param = utf8(b, f.payload_at, "dim_param")?;
                dim = if param.is_empty() {
                    Dim::Unknown
                } else {
                    Dim::Named(param)
                };
            }
            _ => {}
        }
    }
    Ok(dim)
}

// ---------------------------------------------------------------------------
// Stripping
// ---------------------------------------------------------------------------

/// A change to the model: the bytes `start..end` (offsets in the model) are
/// dropped, or replaced by a new length prefix.
#[derive(Debug)]
struct Edit {
    start: usize,
    end: usize,
    new_len: Option<u64>,
}

/// Collects the edits that strip a model: dropped tensor data fields, and new
/// length prefixes for every message around them. Working on offsets keeps the
/// output a single copy of the input, however deep the nesting.
struct Stripper<'r> {
    min_elements: u64,
    report: &'r mut StripReport,
    edits: &'r mut Vec<Edit>,
}

impl Stripper<'_> {
    fn model(&mut self, data: &[u8]) -> Result<(), OnnxError> {
        let mut reader = Reader::new(data, 0, "ModelProto");
        while let Some(f) = reader.next()? {
            if let (7, Payload::Len(b)) = (f.number, f.payload) {
                let removed = self.graph(b, f.payload_at, 0)?;
                self.shrink(&f, removed);
            }
        }
        Ok(())
    }

    /// After `removed` bytes were cut from the payload of `f`, rewrites its
    /// length prefix; returns how many bytes `f` lost in all.
    fn shrink(&mut self, f: &Field<'_>, removed: u64) -> u64 {
        let Payload::Len(body) = f.payload else {
            return 0;
        };
        if removed == 0 {
            return 0;
        }
        let new_len = (body.len() as u64).saturating_sub(removed);
        let prefix_start = f.at + f.tag_len;
        let old_prefix = f.payload_at.saturating_sub(prefix_start) as u64;
        self.edits.push(Edit {
            start: prefix_start,
            end: f.payload_at,
            new_len: Some(new_len),
        });
        removed + old_prefix.saturating_sub(varint_len(new_len))
    }

    fn graph(&mut self, data: &[u8], at: usize, depth: usize) -> Result<u64, OnnxError> {
        let mut removed = 0;
        let mut reader = Reader::new(data, at, "GraphProto");
        while let Some(f) = reader.next()? {
            let inner = match (f.number, f.payload) {
                (1, Payload::Len(b)) => self.node(b, f.payload_at, depth)?,
                (5, Payload::Len(b)) => self.tensor(b, f.payload_at)?,
                _ => continue,
            };
            removed += self.shrink(&f, inner);
        }
        Ok(removed)
    }

    fn node(&mut self, data: &[u8], at: usize, depth: usize) -> Result<u64, OnnxError> {
        let mut removed = 0;
        let mut reader = Reader::new(data, at, "NodeProto");
        while let Some(f) = reader.next()? {
            if let (5, Payload::Len(b)) = (f.number, f.payload) {
                let inner = self.attribute(b, f.payload_at, depth)?;
                removed += self.shrink(&f, inner);
            }
        }
        Ok(removed)
    }

    fn attribute(&mut self, data: &[u8], at: usize, depth: usize) -> Result<u64, OnnxError> {
        let mut removed = 0;
        let mut reader = Reader::new(data, at, "AttributeProto");
        while let Some(f) = reader.next()? {
            if let (6 | 11, Payload::Len(b)) = (f.number, f.payload) {
                // Depth was checked when the model was summarized.
                let inner = self.graph(b, f.payload_at, depth + 1)?;
                removed += self.shrink(&f, inner);
            }
        }
        Ok(removed)
    }

    fn tensor(&mut self, data: &[u8], at: usize) -> Result<u64, OnnxError> {
        let info = read_tensor(data, at)?;
        if !(is_floating(info.data_type) && info.elements > self.min_elements) {
            if let Some(location) = info.external {
                return Err(OnnxError::ExternalData {
                    name: shown(&info.name),
                    location: shown(&location),
                });
            }
            return Ok(0);
        }
        let (mut removed, mut data_removed) = (0u64, 0u64);
        let mut reader = Reader::new(data, at, "TensorProto");
        while let Some(f) = reader.next()? {
            let is_data = TENSOR_DATA_FIELDS.contains(&f.number);
            if is_data || TENSOR_EXTERNAL_FIELDS.contains(&f.number) {
                self.edits.push(Edit {
                    start: f.at,
                    end: f.at + f.raw.len(),
                    new_len: None,
                });
                removed += f.raw.len() as u64;
                if is_data {
                    data_removed += f.payload_len();
                }
            }
        }
        if removed > 0 {
            self.report.tensors += 1;
            self.report.bytes_removed += data_removed;
        }
        Ok(removed)
    }
}

fn varint_len(mut v: u64) -> u64 {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn write_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Copies `bytes` with the edits applied.
fn apply_edits(bytes: &[u8], edits: &mut [Edit]) -> Result<Vec<u8>, OnnxError> {
    edits.sort_by_key(|e| e.start);
    let mut out = Vec::with_capacity(bytes.len());
    let mut pos = 0;
    for edit in edits.iter() {
        let Some(kept) = bytes.get(pos..edit.start) else {
            // Edits come from disjoint fields, so this cannot happen; refuse
            // rather than write a corrupt model if it ever does.
            return Err(malformed(
                edit.start,
                "overlapping edits while stripping (a bug)".to_string(),
            ));
        };
        out.extend_from_slice(kept);
        if let Some(n) = edit.new_len {
            write_varint(&mut out, n);
        }
        pos = edit.end;
    }
    out.extend_from_slice(bytes.get(pos..).unwrap_or_default());
    Ok(out)
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

pub mod supported;

#[cfg(test)]
mod tests;
