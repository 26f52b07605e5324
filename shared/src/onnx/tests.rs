use super::read::read_tensor;
use super::strip::write_varint;
use super::wire::{packed_varints, Payload, Reader, WIRE_LEN, WIRE_VARINT};
use super::*;
use proptest::prelude::*;

// ---------------------------------------------------------------------------
// A tiny protobuf encoder, enough to write ONNX models by hand.
// ---------------------------------------------------------------------------

fn key(field: u32, wire: u8) -> Vec<u8> {
    let mut out = Vec::new();
    write_varint(&mut out, (u64::from(field) << 3) | u64::from(wire));
    out
}

/// A varint field.
fn fv(field: u32, v: u64) -> Vec<u8> {
    let mut out = key(field, WIRE_VARINT);
    write_varint(&mut out, v);
    out
}

/// A length-delimited field.
fn fl(field: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = key(field, WIRE_LEN);
    write_varint(&mut out, payload.len() as u64);
    out.extend_from_slice(payload);
    out
}

fn fs(field: u32, s: &str) -> Vec<u8> {
    fl(field, s.as_bytes())
}

fn cat<const N: usize>(parts: [Vec<u8>; N]) -> Vec<u8> {
    parts.concat()
}

fn packed(values: &[i64]) -> Vec<u8> {
    let mut out = Vec::new();
    for &v in values {
        write_varint(&mut out, v as u64);
    }
    out
}

enum D {
    V(i64),
    P(&'static str),
    U,
}

fn value_info(name: &str, elem_type: i32, dims: Option<&[D]>) -> Vec<u8> {
    let mut tensor = fv(1, elem_type as u64);
    if let Some(dims) = dims {
        let shape: Vec<u8> = dims
            .iter()
            .flat_map(|d| {
                fl(
                    1,
                    &match d {
                        D::V(v) => fv(1, *v as u64),
                        D::P(p) => fs(2, p),
                        D::U => Vec::new(),
                    },
                )
            })
            .collect();
        tensor.extend(fl(2, &shape));
    }
    cat([fs(1, name), fl(2, &fl(1, &tensor))])
}

/// A TensorProto; `data` holds its (already encoded) data fields.
fn tensor(name: &str, data_type: i32, dims: &[i64], data: Vec<u8>) -> Vec<u8> {
    cat([
        fl(1, &packed(dims)),
        fv(2, data_type as u64),
        fs(8, name),
        data,
    ])
}

fn node(op: &str, domain: &str, inputs: &[&str], outputs: &[&str], attrs: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for i in inputs {
        out.extend(fs(1, i));
    }
    for o in outputs {
        out.extend(fs(2, o));
    }
    out.extend(fs(4, op));
    if !domain.is_empty() {
        out.extend(fs(7, domain));
    }
    for a in attrs {
        out.extend(fl(5, a));
    }
    out
}

fn graph_attr(name: &str, graph: &[u8]) -> Vec<u8> {
    cat([fs(1, name), fl(6, graph), fv(20, 5)])
}

fn model(graph: &[u8]) -> Vec<u8> {
    cat([
        fv(1, 8),
        fs(2, "handmade"),
        fs(3, "0.1"),
        fl(7, graph),
        fl(8, &cat([fs(1, ""), fv(2, 17)])),
        fl(8, &cat([fs(1, "com.microsoft"), fv(2, 1)])),
        fv(99, 12345),
    ])
}

const TENSOR_EXTRA: &[u8] = b"tensor-extra";
const GRAPH_EXTRA: &[u8] = b"graph-extra";

fn floats(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect()
}

/// Conv with a 4x3x3x3 float weight (raw_data), a bias (packed float_data),
/// int initializers, a com.microsoft op, an If whose then-branch has its own
/// float initializer, an input `data` of shape [N,3,8,8], and unknown fields in
/// the model, the graph and a tensor.
fn sample() -> Vec<u8> {
    let w = cat([
        tensor("w", 1, &[4, 3, 3, 3], fl(9, &floats(108))),
        fl(50, TENSOR_EXTRA),
    ]);
    let b = tensor("b", 1, &[4], fl(4, &floats(4)));
    let shape = tensor("shape", 7, &[2], fl(7, &packed(&[1, -1])));
    let table = tensor(
        "table",
        6,
        &[100],
        fl(5, &packed(&(0..100).collect::<Vec<_>>())),
    );
    let scale = tensor("scale", 1, &[16], fl(9, &floats(16)));
    let then_g = cat([
        fl(1, &node("Mul", "", &["g", "scale"], &["t"], &[])),
        fs(2, "then"),
        fl(5, &scale),
        fl(12, &value_info("t", 1, None)),
    ]);
    let else_g = cat([
        fl(1, &node("Identity", "", &["g"], &["e"], &[])),
        fs(2, "else"),
        fl(12, &value_info("e", 1, None)),
    ]);
    let if_attrs = [
        graph_attr("then_branch", &then_g),
        graph_attr("else_branch", &else_g),
    ];
    let main = [
        fl(1, &node("Conv", "", &["data", "w", "b"], &["c"], &[])),
        fl(1, &node("Gelu", "com.microsoft", &["c"], &["g"], &[])),
        fl(1, &node("If", "", &["cond"], &["out"], &if_attrs)),
        fs(2, "main"),
        fl(5, &w),
        fl(5, &b),
        fl(5, &shape),
        fl(5, &table),
        fl(
            11,
            &value_info("data", 1, Some(&[D::P("N"), D::V(3), D::V(8), D::V(8)])),
        ),
        fl(11, &value_info("cond", 9, Some(&[]))),
        fl(
            11,
            &value_info("w", 1, Some(&[D::V(4), D::V(3), D::V(3), D::V(3)])),
        ),
        fl(
            12,
            &value_info("out", 1, Some(&[D::P("N"), D::V(4), D::U, D::V(6)])),
        ),
        fl(40, GRAPH_EXTRA),
    ]
    .concat();
    model(&main)
}

/// Every initializer (main graph and subgraphs): name, data_type, dims and
/// data bytes, read independently of the code under test's own walk.
fn all_tensors(bytes: &[u8]) -> Vec<(String, i32, Vec<i64>, u64)> {
    fn graph(data: &[u8], out: &mut Vec<(String, i32, Vec<i64>, u64)>) {
        let mut r = Reader::new(data, 0, "GraphProto");
        while let Some(f) = r.next().unwrap() {
            match (f.number, f.payload) {
                (5, Payload::Len(t)) => {
                    let info = read_tensor(t, 0).unwrap();
                    let mut dims = Vec::new();
                    let mut tr = Reader::new(t, 0, "TensorProto");
                    while let Some(tf) = tr.next().unwrap() {
                        match (tf.number, tf.payload) {
                            (1, Payload::Len(p)) => {
                                packed_varints(p, 0, "dims", |d| dims.push(d as i64)).unwrap()
                            }
                            (1, Payload::Varint(d)) => dims.push(d as i64),
                            _ => {}
                        }
                    }
                    out.push((info.name, info.data_type, dims, info.data_bytes));
                }
                (1, Payload::Len(n)) => {
                    let mut nr = Reader::new(n, 0, "NodeProto");
                    while let Some(nf) = nr.next().unwrap() {
                        if let (5, Payload::Len(a)) = (nf.number, nf.payload) {
                            let mut ar = Reader::new(a, 0, "AttributeProto");
                            while let Some(af) = ar.next().unwrap() {
                                if let (6 | 11, Payload::Len(g)) = (af.number, af.payload) {
                                    graph(g, out);
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    let mut r = Reader::new(bytes, 0, "ModelProto");
    while let Some(f) = r.next().unwrap() {
        if let (7, Payload::Len(g)) = (f.number, f.payload) {
            graph(g, &mut out);
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The summary with the one field stripping changes zeroed.
fn without_bytes(mut s: OnnxSummary) -> OnnxSummary {
    s.initializer_bytes = 0;
    s
}

// ---------------------------------------------------------------------------
// Summaries
// ---------------------------------------------------------------------------

#[test]
fn summarizes_a_handmade_model() {
    let s = summarize(&sample()).unwrap();
    assert_eq!(s.ir_version, 8);
    assert_eq!(
        s.opsets,
        vec![("".to_string(), 17), ("com.microsoft".to_string(), 1)]
    );
    assert_eq!(
        (s.producer_name.as_str(), s.producer_version.as_str()),
        ("handmade", "0.1")
    );
    assert_eq!(s.graph_name, "main");
    // `w` is listed as an input but is an initializer.
    assert_eq!(
        s.inputs,
        vec![
            ValueInfo {
                name: "data".into(),
                elem_type: 1,
                dims: vec![
                    Dim::Named("N".into()),
                    Dim::Fixed(3),
                    Dim::Fixed(8),
                    Dim::Fixed(8)
                ],
                rank_known: true,
            },
            ValueInfo {
                name: "cond".into(),
                elem_type: 9,
                dims: vec![],
                rank_known: true,
            },
        ]
    );
    assert_eq!(
        s.outputs,
        vec![ValueInfo {
            name: "out".into(),
            elem_type: 1,
            dims: vec![
                Dim::Named("N".into()),
                Dim::Fixed(4),
                Dim::Unknown,
                Dim::Fixed(6)
            ],
            rank_known: true,
        }]
    );
    let ops: Vec<(&str, usize)> = s.op_types.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(
        ops,
        vec![
            ("Conv", 1),
            ("Identity", 1),
            ("If", 1),
            ("Mul", 1),
            ("com.microsoft.Gelu", 1)
        ]
    );
    assert_eq!(s.nodes, 5);
    assert_eq!(s.initializers, 5);
    // w 432 + b 16 + shape 11 (varints 1 and -1) + table 100 + scale 64.
    assert_eq!(s.initializer_bytes, 432 + 16 + 11 + 100 + 64);
    assert_eq!(s.external_data, 0);
}

#[test]
fn summary_serializes_dims_as_numbers_strings_and_null() {
    let s = summarize(&sample()).unwrap();
    let json = serde_json::to_value(&s.outputs[0]).unwrap();
    assert_eq!(json["dims"], serde_json::json!(["N", 4, null, 6]));
    let back: OnnxSummary = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
    assert_eq!(back, s);
}

#[test]
fn value_without_shape_has_unknown_rank() {
    let g = cat([
        fl(1, &node("Relu", "", &["x"], &["y"], &[])),
        fl(11, &value_info("x", 1, None)),
        fl(11, &cat([fs(1, "seq"), fl(2, &fl(4, b""))])), // a sequence, not a tensor
        fl(12, &value_info("y", 1, None)),
    ]);
    let s = summarize(&model(&g)).unwrap();
    assert!(!s.inputs[0].rank_known && s.inputs[0].elem_type == 1);
    assert!(!s.inputs[1].rank_known && s.inputs[1].elem_type == 0);
    assert_eq!(s.graph_name, "");
}

#[test]
fn sparse_initializers_count_and_hide_their_input() {
    let values = tensor("sp", 1, &[2], fl(4, &floats(2)));
    let indices = tensor("", 7, &[2], fl(7, &packed(&[0, 5])));
    let sparse = cat([fl(1, &values), fl(2, &indices), fl(3, &packed(&[10]))]);
    let g = cat([
        fl(1, &node("Add", "", &["x", "sp"], &["y"], &[])),
        fl(15, &sparse),
        fl(11, &value_info("x", 1, Some(&[D::V(10)]))),
        fl(11, &value_info("sp", 1, Some(&[D::V(10)]))),
        fl(12, &value_info("y", 1, Some(&[D::V(10)]))),
    ]);
    let s = summarize(&model(&g)).unwrap();
    assert_eq!(s.initializers, 1);
    assert_eq!(s.initializer_bytes, 8 + 2);
    let names: Vec<&str> = s.inputs.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["x"]);
}

#[test]
fn unpacked_dims_and_non_minimal_varints_are_read() {
    // dims as separate varint fields, and a length prefix padded to 3 bytes.
    let w = cat([fv(1, 2), fv(1, 3), fv(2, 1), fs(8, "w"), fl(9, &floats(6))]);
    let mut padded = key(5, WIRE_LEN);
    padded.extend([(w.len() as u8) | 0x80, 0x80, 0x00]);
    padded.extend(&w);
    let g = cat([fl(1, &node("Relu", "", &["w"], &["y"], &[])), padded]);
    let bytes = model(&g);
    let s = summarize(&bytes).unwrap();
    assert_eq!((s.initializers, s.initializer_bytes), (1, 24));
    let (out, report) = strip_weights(&bytes, 0).unwrap();
    assert_eq!(report.tensors, 1);
    assert_eq!(all_tensors(&out), vec![("w".to_string(), 1, vec![2, 3], 0)]);
    // Nothing stripped: byte for byte, padding included.
    assert_eq!(strip_weights(&bytes, 6).unwrap().0, bytes);
}

// ---------------------------------------------------------------------------
// Stripping
// ---------------------------------------------------------------------------

#[test]
fn strip_keeps_names_dims_and_types_and_shrinks() {
    let bytes = sample();
    let (out, report) = strip_weights(&bytes, 8).unwrap();
    assert_eq!(
        report.tensors, 2,
        "w (108 elements) and scale (16); b has 4"
    );
    assert_eq!(report.bytes_removed, 432 + 64);
    assert_eq!(report.bytes_before, bytes.len() as u64);
    assert_eq!(report.bytes_after, out.len() as u64);
    assert!(report.bytes_before - report.bytes_after >= report.bytes_removed);

    let before = all_tensors(&bytes);
    let after = all_tensors(&out);
    assert_eq!(before.len(), after.len());
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            (&b.0, b.1, &b.2),
            (&a.0, a.1, &a.2),
            "name, type and dims kept"
        );
        let stripped = b.0 == "w" || b.0 == "scale";
        assert_eq!(a.3, if stripped { 0 } else { b.3 }, "data of {}", b.0);
    }
    // Integers stay even when large and with min_elements 0.
    let (out0, report0) = strip_weights(&bytes, 0).unwrap();
    assert_eq!(report0.tensors, 3);
    let kept: Vec<String> = all_tensors(&out0)
        .into_iter()
        .filter(|t| t.3 > 0)
        .map(|t| t.0)
        .collect();
    assert_eq!(kept, ["shape", "table"]);
}

#[test]
fn stripped_model_summarizes_the_same() {
    let bytes = sample();
    for min in [0, 8, 100, u64::MAX] {
        let (out, _) = strip_weights(&bytes, min).unwrap();
        let (a, b) = (summarize(&bytes).unwrap(), summarize(&out).unwrap());
        assert_eq!(without_bytes(a), without_bytes(b), "min_elements {min}");
    }
    let (out, _) = strip_weights(&bytes, 0).unwrap();
    assert_eq!(summarize(&out).unwrap().initializer_bytes, 11 + 100);
}

#[test]
fn unknown_fields_survive_byte_for_byte() {
    let bytes = sample();
    let (out, _) = strip_weights(&bytes, 0).unwrap();
    assert!(contains(&out, &fl(50, TENSOR_EXTRA)));
    assert!(contains(&out, &fl(40, GRAPH_EXTRA)));
    assert!(out.ends_with(&fv(99, 12345)));
    // Nothing to strip: the very same bytes.
    let (same, report) = strip_weights(&bytes, u64::MAX).unwrap();
    assert_eq!(same, bytes);
    assert_eq!((report.tensors, report.bytes_removed), (0, 0));
    // Stripping is idempotent.
    let (again, report) = strip_weights(&out, 0).unwrap();
    assert_eq!(again, out);
    assert_eq!(report.tensors, 0);
}

#[test]
fn strips_float16_in_int32_data_and_external_references() {
    let half = tensor("h", 10, &[64], fl(5, &packed(&[15360; 64])));
    let external = cat([
        tensor("e", 1, &[1000], Vec::new()),
        fl(13, &cat([fs(1, "location"), fs(2, "weights.bin")])),
        fl(13, &cat([fs(1, "offset"), fs(2, "0")])),
        fv(14, 1),
    ]);
    let g = cat([
        fl(1, &node("Add", "", &["h", "e"], &["y"], &[])),
        fl(5, &half),
        fl(5, &external),
        fl(12, &value_info("y", 1, Some(&[D::V(64)]))),
    ]);
    let bytes = model(&g);
    let s = summarize(&bytes).unwrap();
    assert_eq!(s.external_data, 1);
    let (out, report) = strip_weights(&bytes, 16).unwrap();
    assert_eq!(report.tensors, 2);
    assert!(!contains(&out, b"weights.bin"));
    let s = summarize(&out).unwrap();
    assert_eq!((s.external_data, s.initializer_bytes), (0, 0));
}

#[test]
fn kept_external_data_is_refused() {
    let external = cat([
        tensor("idx", 7, &[1000], Vec::new()),
        fl(13, &cat([fs(1, "location"), fs(2, "idx.bin")])),
        fv(14, 1),
    ]);
    let g = cat([
        fl(1, &node("Gather", "", &["x", "idx"], &["y"], &[])),
        fl(5, &external),
    ]);
    let err = strip_weights(&model(&g), 16).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "external data is not supported: initializer `idx` keeps its data in `idx.bin`"
        ),
        "{err}"
    );
}

// ---------------------------------------------------------------------------
// Input shapes
// ---------------------------------------------------------------------------

fn shapes(args: &[&str]) -> BTreeMap<String, Vec<i64>> {
    parse_input_shapes(args.iter().copied()).unwrap()
}

#[test]
fn dynamic_inputs_need_a_shape() {
    let s = summarize(&sample()).unwrap();
    assert_eq!(
        check_inputs(&s, &BTreeMap::new()).unwrap_err().to_string(),
        "input `data` has a dynamic dimension (dim 0 = `N`); pass --input-shape data=1,3,8,8 (with your sizes)"
    );
    assert_eq!(
        check_inputs(&s, &shapes(&["data=2,3,8,8"])).unwrap(),
        vec![
            ("data".to_string(), vec![2, 3, 8, 8]),
            ("cond".to_string(), vec![])
        ]
    );
    assert_eq!(
        check_inputs(&s, &shapes(&["data=2,3,8,8", "foo=1"]))
            .unwrap_err()
            .to_string(),
        "--input-shape names `foo`, which is not a model input (inputs: data, cond)"
    );
    assert_eq!(
        check_inputs(&s, &shapes(&["data=2,3,8"]))
            .unwrap_err()
            .to_string(),
        "--input-shape gives 3 dimensions for `data`, but the model input has 4"
    );
    assert_eq!(
        check_inputs(&s, &shapes(&["data=2,4,8,8"]))
            .unwrap_err()
            .to_string(),
        "--input-shape gives 4 for dim 1 of `data`, but the model fixes it to 3"
    );
    let mut zero = BTreeMap::new();
    zero.insert("data".to_string(), vec![0, 3, 8, 8]);
    assert!(check_inputs(&s, &zero)
        .unwrap_err()
        .to_string()
        .contains("at least 1"));
}

#[test]
fn unknown_dims_and_missing_shapes_are_named() {
    let g = cat([
        fl(11, &value_info("x", 1, Some(&[D::V(1), D::U]))),
        fl(11, &value_info("y", 1, None)),
        fl(11, &value_info("z", 1, Some(&[D::V(-1), D::V(2)]))),
    ]);
    let s = summarize(&model(&g)).unwrap();
    assert_eq!(
        check_inputs(&s, &BTreeMap::new()).unwrap_err().to_string(),
        "input `x` has a dimension of unknown size (dim 1); pass --input-shape x=1,1 (with your sizes)"
    );
    assert_eq!(
        check_inputs(&s, &shapes(&["x=1,5"]))
            .unwrap_err()
            .to_string(),
        "input `y` has no shape in the model; pass --input-shape y=D0,D1,... with its full shape"
    );
    assert_eq!(
        check_inputs(&s, &shapes(&["x=1,5", "y=7"])).unwrap_err().to_string(),
        "input `z` has a dynamic dimension (dim 0 = `-1`); pass --input-shape z=1,2 (with your sizes)"
    );
    let all = check_inputs(&s, &shapes(&["x=1,5", "y=7", "z=3,2"])).unwrap();
    assert_eq!(all[1], ("y".to_string(), vec![7]));
    let none = summarize(&model(&[])).unwrap();
    assert_eq!(
        check_inputs(&none, &shapes(&["a=1"]))
            .unwrap_err()
            .to_string(),
        "--input-shape names `a`, which is not a model input (inputs: the model has none)"
    );
}

#[test]
fn parses_input_shapes() {
    assert_eq!(
        parse_input_shape("data=1,3,224,224").unwrap(),
        ("data".to_string(), vec![1, 3, 224, 224])
    );
    assert_eq!(
        parse_input_shape(" x = 2 , 3 ").unwrap(),
        ("x".to_string(), vec![2, 3])
    );
    assert_eq!(
        parse_input_shape("a=b=4").unwrap(),
        ("a=b".to_string(), vec![4])
    );
    assert_eq!(
        parse_input_shape("scalar=").unwrap(),
        ("scalar".to_string(), vec![])
    );
    for (arg, why) in [
        ("data", "there is no `=`"),
        ("=1,2", "the input name before `=` is empty"),
        ("x=1,,2", "`` is not a whole number"),
        ("x=1,a", "`a` is not a whole number"),
        ("x=1,0", "size 0 must be at least 1"),
        ("x=-3", "size -3 must be at least 1"),
    ] {
        assert_eq!(
            parse_input_shape(arg).unwrap_err().to_string(),
            format!(
                "--input-shape `{arg}`: {why} (expected NAME=D0,D1,..., e.g. data=1,3,224,224)"
            )
        );
    }
    assert_eq!(
        parse_input_shapes(["x=1", "x=2"]).unwrap_err().to_string(),
        "--input-shape is given twice for `x`"
    );
}

// ---------------------------------------------------------------------------
// Things that are not models
// ---------------------------------------------------------------------------

fn not_onnx(bytes: &[u8]) -> String {
    let err = summarize(bytes).unwrap_err().to_string();
    assert!(err.starts_with("not an ONNX model: "), "{err}");
    assert_eq!(strip_weights(bytes, 0).unwrap_err().to_string(), err);
    err
}

#[test]
fn other_files_are_not_models() {
    let jpeg = [
        0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, b'J', b'F', b'I', b'F', 0, 1, 1, 0, 0, 1,
    ];
    assert_eq!(
        not_onnx(&jpeg),
        "not an ONNX model: the file is a JPEG image"
    );
    let yaml = b"target: {kind: llvm}\nworkloads:\n  - name: mm\n    op: matmul\n";
    assert_eq!(
        not_onnx(yaml),
        "not an ONNX model: the file is text (it starts with `target: {kind: llvm}`), not a binary protobuf"
    );
    assert!(not_onnx(b"ir_version: 8\ngraph {\n}\n").contains("text-format"));
    assert_eq!(not_onnx(b""), "not an ONNX model: the file is empty");
    assert!(not_onnx(b"PK\x03\x04\x14\x00\x00\x00").contains("torch.onnx.export"));
    // Binary junk without a known signature: the position of the problem.
    let err = not_onnx(&[0x08, 0x08, 0x3a, 0x04, 0x0a, 0x02, 0xff, 0xff]);
    assert!(err.ends_with("at byte 6"), "{err}");
    assert!(
        err.contains("GraphProto") || err.contains("NodeProto"),
        "{err}"
    );
}

#[test]
fn structural_problems_have_clear_errors() {
    assert_eq!(summarize(&fv(1, 8)).unwrap_err(), OnnxError::NoGraph);
    assert_eq!(
        summarize(&fv(1, 8)).unwrap_err().to_string(),
        "the model has no graph"
    );
    assert_eq!(
        summarize(&[fv(60, 3), fv(1000, 1)].concat())
            .unwrap_err()
            .to_string(),
        "not an ONNX model: it has neither an ir_version nor a graph"
    );
    assert_eq!(
        summarize(&[fv(1, 8), fv(7, 1)].concat()).unwrap_err().to_string(),
        "not an ONNX model: field 7 (graph) of ModelProto has wire type 0 (varint), expected length-delimited at byte 2"
    );
    assert_eq!(
        summarize(&[fv(1, 5000)].concat()).unwrap_err().to_string(),
        "not an ONNX model: ir_version 5000 is not an ONNX IR version at byte 0"
    );
    assert!(summarize(&[fl(7, &[]), fl(7, &[])].concat()).is_err());
    assert_eq!(
        summarize(&fl(7, &[])).unwrap_err().to_string(),
        "not an ONNX model: the model has no ir_version"
    );
    // A group inside the graph.
    let err = summarize(&[fv(1, 8), fl(7, &key(3, 3))].concat())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "not an ONNX model: field 3 of GraphProto is a group (wire type 3), which ONNX never uses at byte 4"
    );
    // Cut short inside the graph.
    let bytes = sample();
    let err = summarize(&bytes[..bytes.len() / 2])
        .unwrap_err()
        .to_string();
    assert!(err.contains("the data is cut short?"), "{err}");
    // Invalid UTF-8 in a name.
    let err = summarize(&[fv(1, 8), fl(7, &fl(2, &[0xc3, 0x28]))].concat())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "not an ONNX model: graph name is not valid UTF-8 at byte 6"
    );
}

#[test]
fn deep_subgraphs_are_refused_not_overflowing() {
    let mut g = fl(1, &node("Relu", "", &["x"], &["y"], &[]));
    for _ in 0..200 {
        g = fl(
            1,
            &node("If", "", &["c"], &["y"], &[graph_attr("then_branch", &g)]),
        );
    }
    let err = summarize(&model(&g)).unwrap_err();
    assert!(matches!(err, OnnxError::Limit { .. }), "{err}");
    assert!(
        err.to_string().contains("nested more than 32 deep"),
        "{err}"
    );

    let mut g = fl(1, &node("Relu", "", &["x"], &["y"], &[]));
    for _ in 0..MAX_GRAPH_DEPTH {
        g = fl(
            1,
            &node("If", "", &["c"], &["y"], &[graph_attr("then_branch", &g)]),
        );
    }
    assert_eq!(summarize(&model(&g)).unwrap().nodes, MAX_GRAPH_DEPTH + 1);
}

#[test]
fn too_many_dimensions_are_refused() {
    let dims: Vec<D> = (0..=MAX_RANK).map(|_| D::V(1)).collect();
    let g = fl(11, &value_info("x", 1, Some(&dims)));
    let err = summarize(&model(&g)).unwrap_err().to_string();
    assert!(err.contains("`x` has more than 64 dimensions"), "{err}");
}

#[test]
fn every_truncation_fails_cleanly() {
    let bytes = sample();
    let mut errors = 0;
    for cut in 0..bytes.len() {
        let part = &bytes[..cut];
        match summarize(part) {
            Err(_) => errors += 1,
            // Cut between two top-level fields after the graph: still a model.
            Ok(s) => {
                let (out, _) = strip_weights(part, 0).unwrap();
                assert_eq!(without_bytes(summarize(&out).unwrap()), without_bytes(s));
            }
        }
        let _ = strip_weights(part, 0);
    }
    assert!(errors > bytes.len() * 9 / 10, "{errors} of {}", bytes.len());
}

#[test]
fn random_bytes_are_rejected() {
    // A fixed xorshift stream, so failures reproduce.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..2000 {
        let len = (next() % 300) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        assert!(summarize(&bytes).is_err());
        assert!(strip_weights(&bytes, 0).is_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = summarize(&bytes);
        let _ = strip_weights(&bytes, 0);
    }

    /// Corrupting a valid model: errors or a model whose stripped form reads
    /// back the same, never a panic.
    #[test]
    fn mutations_of_a_model_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        min in 0u64..200,
    ) {
        let mut bytes = sample();
        for (i, b) in edits {
            let at = i.index(bytes.len());
            bytes[at] = b;
        }
        if let Ok(s) = summarize(&bytes) {
            match strip_weights(&bytes, min) {
                Ok((out, report)) => {
                    prop_assert_eq!(report.bytes_after, out.len() as u64);
                    prop_assert_eq!(without_bytes(summarize(&out).unwrap()), without_bytes(s));
                }
                Err(e) => prop_assert!(matches!(e, OnnxError::ExternalData { .. }), "{}", e),
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Real models, when the onnx Python package's test data is installed
// ---------------------------------------------------------------------------

#[test]
fn onnx_backend_light_models() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.venv/lib/python3.11/site-packages/onnx/backend/test/data/light");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let mut seen = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string();
        if !(name.starts_with("light_") && name.ends_with(".onnx")) {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let s = summarize(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.ir_version, 3, "{name}");
        assert!(s.nodes > 0 && s.initializers > 0, "{name}");
        assert_eq!(s.op_types.values().sum::<usize>(), s.nodes, "{name}");
        assert_eq!(s.inputs.len(), 1, "{name}: {:?}", s.inputs);
        // These "light" models make their weights at run time from int64 shape
        // initializers (kept); only a few small float ones (biases) go.
        let floats = all_tensors(&bytes)
            .iter()
            .filter(|t| t.1 == 1 && t.3 > 0)
            .count();
        let (out, report) = strip_weights(&bytes, 0).unwrap();
        assert_eq!(report.tensors, floats, "{name}");
        assert_eq!(out.len() < bytes.len(), floats > 0, "{name}");
        assert_eq!(
            without_bytes(summarize(&out).unwrap()),
            without_bytes(s.clone()),
            "{name}"
        );
        if name == "light_resnet50.onnx" {
            assert!(s.op_types.contains_key("Conv"));
            assert_eq!((s.nodes, s.initializers), (415, 269));
            assert_eq!(s.inputs[0].name, "gpu_0/data_0");
            assert_eq!(s.inputs[0].dims, [1, 3, 224, 224].map(Dim::Fixed).to_vec());
            check_inputs(&s, &BTreeMap::new()).unwrap();
        }
        seen += 1;
    }
    assert!(seen > 0, "no light_*.onnx in {}", dir.display());
}
