//! Reading a model: the graph's inputs, outputs, operators and weights,
//! counted and checked against the limits.

use std::collections::{BTreeMap, BTreeSet};

use super::wire::{
    malformed, packed_varints, utf8, Payload, Reader, ATTRIBUTE, DIMENSION, GRAPH, MODEL, NODE,
    OPSET, SHAPE, SPARSE_TENSOR, STRING_ENTRY, TENSOR, TENSOR_DATA_FIELDS, TYPE, TYPE_TENSOR,
    VALUE_INFO,
};
use super::{
    shown, Dim, OnnxError, OnnxSummary, ValueInfo, MAX_GRAPH_DEPTH, MAX_GRAPH_VALUES,
    MAX_IR_VERSION, MAX_OP_TYPES, MAX_RANK,
};

/// Counts over the main graph and all subgraphs.
#[derive(Default)]
pub(super) struct Totals {
    pub(super) nodes: usize,
    pub(super) op_types: BTreeMap<String, usize>,
    pub(super) initializers: usize,
    pub(super) initializer_bytes: u64,
    pub(super) external_data: usize,
}

/// What the main graph contributes besides the counts.
#[derive(Default)]
pub(super) struct MainGraph {
    pub(super) name: String,
    pub(super) inputs: Vec<ValueInfo>,
    pub(super) outputs: Vec<ValueInfo>,
}

pub(super) fn read_model(bytes: &[u8]) -> Result<OnnxSummary, OnnxError> {
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

pub(super) fn read_opset(data: &[u8], at: usize) -> Result<(String, i64), OnnxError> {
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
pub(super) fn read_graph(
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

pub(super) fn read_node(
    data: &[u8],
    at: usize,
    depth: usize,
    totals: &mut Totals,
) -> Result<(), OnnxError> {
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

pub(super) fn read_attribute(
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
pub(super) struct TensorInfo {
    pub(super) name: String,
    pub(super) data_type: i32,
    /// Product of the dims (1 for a scalar), saturating; 0 if a dim is negative.
    pub(super) elements: u64,
    /// Payload bytes of the data fields, as encoded.
    pub(super) data_bytes: u64,
    /// `location` of external data, if the tensor has any.
    pub(super) external: Option<String>,
}

pub(super) fn read_tensor(data: &[u8], at: usize) -> Result<TensorInfo, OnnxError> {
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
pub(super) fn read_sparse_tensor(data: &[u8], at: usize) -> Result<(String, u64, bool), OnnxError> {
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

pub(super) fn read_string_entry(
    data: &[u8],
    at: usize,
) -> Result<(Option<String>, String), OnnxError> {
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

pub(super) fn read_value_info(data: &[u8], at: usize) -> Result<ValueInfo, OnnxError> {
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

pub(super) fn read_tensor_type(
    data: &[u8],
    at: usize,
    value: &mut ValueInfo,
) -> Result<(), OnnxError> {
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

pub(super) fn read_dimension(data: &[u8], at: usize) -> Result<Dim, OnnxError> {
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
