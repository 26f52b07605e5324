//! The protobuf wire format, read by hand: fields, varints, and the field
//! numbers and wire types of the ONNX messages read here.

use super::{OnnxError, MAX_FIELD_NUMBER};

pub(super) const WIRE_VARINT: u8 = 0;
pub(super) const WIRE_I64: u8 = 1;
pub(super) const WIRE_LEN: u8 = 2;
pub(super) const WIRE_I32: u8 = 5;

/// Masks of the wire types a known field may use (`1 << wire type`).
pub(super) const V: u8 = 1 << WIRE_VARINT;
pub(super) const F64: u8 = 1 << WIRE_I64;
pub(super) const L: u8 = 1 << WIRE_LEN;
pub(super) const F32: u8 = 1 << WIRE_I32;

pub(super) fn wire_name(wire: u8) -> &'static str {
    match wire {
        WIRE_VARINT => "varint",
        WIRE_I64 => "64-bit",
        WIRE_LEN => "length-delimited",
        WIRE_I32 => "32-bit",
        _ => "invalid",
    }
}

pub(super) fn expected_wires(mask: u8) -> String {
    let names: Vec<&str> = [WIRE_VARINT, WIRE_I64, WIRE_LEN, WIRE_I32]
        .into_iter()
        .filter(|w| mask & (1 << w) != 0)
        .map(wire_name)
        .collect();
    names.join(" or ")
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Payload<'a> {
    Varint(u64),
    I64,
    Len(&'a [u8]),
    I32,
}

/// One field of a message, with offsets into the whole model.
#[derive(Clone, Copy, Debug)]
pub(super) struct Field<'a> {
    pub(super) number: u32,
    pub(super) wire: u8,
    /// The whole field as encoded: tag, length prefix if any, payload.
    pub(super) raw: &'a [u8],
    /// Length of the tag within `raw`.
    pub(super) tag_len: usize,
    /// Offset of the tag in the model.
    pub(super) at: usize,
    /// Offset of the payload (after any length prefix) in the model.
    pub(super) payload_at: usize,
    pub(super) payload: Payload<'a>,
}

impl Field<'_> {
    /// Bytes of payload, as encoded (without tag or length prefix).
    pub(super) fn payload_len(&self) -> u64 {
        match self.payload {
            Payload::Varint(_) => self.raw.len().saturating_sub(self.tag_len) as u64,
            Payload::I64 => 8,
            Payload::Len(b) => b.len() as u64,
            Payload::I32 => 4,
        }
    }
}

pub(super) fn read_varint(data: &[u8], pos: usize) -> Result<(u64, usize), &'static str> {
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
pub(super) struct Reader<'a> {
    pub(super) data: &'a [u8],
    pub(super) pos: usize,
    /// Offset of `data` in the model, for error positions.
    pub(super) base: usize,
    /// Message type, for error messages.
    pub(super) msg: &'static str,
}

pub(super) fn malformed(offset: usize, reason: String) -> OnnxError {
    OnnxError::Malformed { offset, reason }
}

impl<'a> Reader<'a> {
    pub(super) fn new(data: &'a [u8], base: usize, msg: &'static str) -> Self {
        Reader {
            data,
            pos: 0,
            base,
            msg,
        }
    }

    /// The next field; `None` at the end of the message.
    pub(super) fn next(&mut self) -> Result<Option<Field<'a>>, OnnxError> {
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
    pub(super) fn next_known(
        &mut self,
        known: &[(u32, &str, u8)],
    ) -> Result<Option<Field<'a>>, OnnxError> {
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

pub(super) fn utf8(bytes: &[u8], at: usize, what: &str) -> Result<String, OnnxError> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| malformed(at, format!("{what} is not valid UTF-8")))
}

/// Calls `each` with every varint of a packed repeated field.
pub(super) fn packed_varints(
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

pub(super) const MODEL: &[(u32, &str, u8)] = &[
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
pub(super) const OPSET: &[(u32, &str, u8)] = &[(1, "domain", L), (2, "version", V)];
pub(super) const GRAPH: &[(u32, &str, u8)] = &[
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
pub(super) const NODE: &[(u32, &str, u8)] = &[
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
pub(super) const ATTRIBUTE: &[(u32, &str, u8)] = &[
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
pub(super) const TENSOR: &[(u32, &str, u8)] = &[
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
pub(super) const TENSOR_DATA_FIELDS: [u32; 7] = [4, 5, 6, 7, 9, 10, 11];
pub(super) const TENSOR_EXTERNAL_FIELDS: [u32; 2] = [13, 14];
pub(super) const SPARSE_TENSOR: &[(u32, &str, u8)] =
    &[(1, "values", L), (2, "indices", L), (3, "dims", V | L)];
pub(super) const STRING_ENTRY: &[(u32, &str, u8)] = &[(1, "key", L), (2, "value", L)];
pub(super) const VALUE_INFO: &[(u32, &str, u8)] = &[
    (1, "name", L),
    (2, "type", L),
    (3, "doc_string", L),
    (4, "metadata_props", L),
];
pub(super) const TYPE: &[(u32, &str, u8)] = &[
    (1, "tensor_type", L),
    (4, "sequence_type", L),
    (5, "map_type", L),
    (6, "denotation", L),
    (8, "sparse_tensor_type", L),
    (9, "optional_type", L),
];
pub(super) const TYPE_TENSOR: &[(u32, &str, u8)] = &[(1, "elem_type", V), (2, "shape", L)];
pub(super) const SHAPE: &[(u32, &str, u8)] = &[(1, "dim", L)];
pub(super) const DIMENSION: &[(u32, &str, u8)] = &[
    (1, "dim_value", V),
    (2, "dim_param", L),
    (3, "denotation", L),
];
