use super::*;
use tunefleet_shared::model::{base64, MAX_MODEL_BYTES};

// A hand-built ModelProto, as in `shared/src/onnx/tests.rs`: one Relu,
// input `x` of shape [first, 4] (float), one float initializer `w` of
// `init` elements.
fn field(out: &mut Vec<u8>, number: u32, payload: &[u8]) {
    varint_raw(out, u64::from((number << 3) | 2));
    varint_raw(out, payload.len() as u64);
    out.extend_from_slice(payload);
}
fn varint_raw(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}
fn varint(out: &mut Vec<u8>, number: u32, value: u64) {
    varint_raw(out, u64::from(number << 3));
    varint_raw(out, value);
}
fn value_info(name: &str, first: Option<&str>) -> Vec<u8> {
    let mut dims = Vec::new();
    let mut d0 = Vec::new();
    match first {
        Some(p) => field(&mut d0, 2, p.as_bytes()),
        None => varint(&mut d0, 1, 4),
    }
    field(&mut dims, 1, &d0);
    let mut d1 = Vec::new();
    varint(&mut d1, 1, 4);
    field(&mut dims, 1, &d1);
    let mut tensor = Vec::new();
    varint(&mut tensor, 1, 1);
    field(&mut tensor, 2, &dims);
    let mut ty = Vec::new();
    field(&mut ty, 1, &tensor);
    let mut vi = Vec::new();
    field(&mut vi, 1, name.as_bytes());
    field(&mut vi, 2, &ty);
    vi
}
fn model(first: Option<&str>, init: usize) -> Vec<u8> {
    model_with(first, &[(init, 1, 4)])
}
/// Initializers as (elements, data type, bytes per element).
fn model_with(first: Option<&str>, inits: &[(usize, u64, usize)]) -> Vec<u8> {
    let mut node = Vec::new();
    field(&mut node, 1, b"x");
    field(&mut node, 2, b"y");
    field(&mut node, 4, b"Relu");
    let mut graph = Vec::new();
    field(&mut graph, 1, &node);
    field(&mut graph, 2, b"g");
    for (i, &(elements, data_type, size)) in inits.iter().enumerate() {
        if elements == 0 {
            continue;
        }
        let mut tensor = Vec::new();
        varint(&mut tensor, 1, elements as u64); // dims
        varint(&mut tensor, 2, data_type);
        field(&mut tensor, 8, format!("w{i}").as_bytes());
        field(&mut tensor, 9, &vec![0u8; elements * size]); // raw_data
        field(&mut graph, 5, &tensor);
    }
    field(&mut graph, 11, &value_info("x", first));
    field(&mut graph, 12, &value_info("y", first));
    let mut m = Vec::new();
    varint(&mut m, 1, 8); // ir_version
    let mut opset = Vec::new();
    varint(&mut opset, 2, 17);
    field(&mut m, 8, &opset);
    field(&mut m, 7, &graph);
    m
}

#[test]
fn recognises_model_files() {
    assert!(is_model_file("resnet50.onnx"));
    assert!(is_model_file("A.ONNX"));
    assert!(!is_model_file(".onnx"));
    assert!(!is_model_file("workloads.yaml"));
    assert!(!is_model_file("x.onnx.yaml"));
}

#[test]
fn default_names_come_from_the_stem() {
    assert_eq!(default_name("light_squeezenet.onnx"), "light_squeezenet");
    assert_eq!(default_name("dir/my model (1).onnx"), "my-model--1-");
    assert_eq!(default_name(".onnx"), ".onnx");
    assert_eq!(default_name(&format!("{}.onnx", "a".repeat(80))).len(), 64);
    assert!(check_model_name(&default_name("ü.onnx")).is_ok());
}

#[test]
fn a_static_model_previews_and_submits() {
    let bytes = model(None, 1000);
    let m = load("relu.onnx", &bytes).unwrap();
    assert_eq!(m.inputs.len(), 1);
    assert_eq!(m.inputs[0].name, "x");
    assert_eq!(m.inputs[0].dims, "4×4");
    assert_eq!(m.inputs[0].dtype, "float32");
    assert!(!m.inputs[0].needs_shape);
    assert_eq!(m.summary.nodes, 1);
    assert_eq!(m.op_type_count(), 1);
    assert_eq!(m.top_ops(5), vec![("Relu".to_string(), 1)]);
    assert_eq!(m.report.tensors, 1);
    let stripped = base64::decode(&m.stripped_b64).unwrap();
    assert!(stripped.len() < bytes.len() - 3900, "the weights are gone");
    let note = m.weights_note();
    assert!(note.contains("not uploaded"), "{note}");
    assert!(note.contains("random weights"), "{note}");
    assert!(note.contains("1 weight tensor stripped"), "{note}");

    let form = ModelForm::for_file("relu.onnx");
    assert_eq!(form.name, "relu");
    assert_eq!(form.trials, "2000");
    let checked = check_form(&m, &form, &[]).unwrap();
    assert_eq!(checked.resolved, vec![("x".to_string(), vec![4, 4])]);
    let sub = submission(&m, &checked);
    assert_eq!(sub.name, "relu");
    assert_eq!(sub.trials, Some(2000));
    assert!(sub.source.input_shapes.is_empty());
    assert_eq!(base64::decode(&sub.source.onnx_b64).unwrap(), stripped);
    // What the master checks passes.
    let sent = base64::decode(&sub.source.onnx_b64).unwrap();
    let summary = onnx::summarize(&sent).unwrap();
    onnx::check_inputs(&summary, &sub.source.input_shapes).unwrap();
}

#[test]
fn small_models_say_nothing_was_stripped() {
    let m = load("tiny.onnx", &model(None, 0)).unwrap();
    assert_eq!(m.report.tensors, 0);
    assert!(m.weights_note().contains("no weight data to strip"));
    assert!(m.weights_note().contains("random weights"));
}

#[test]
fn a_dynamic_input_needs_a_shape() {
    let m = load("dyn.onnx", &model(Some("N"), 0)).unwrap();
    assert_eq!(m.inputs[0].dims, "N×4");
    assert!(m.inputs[0].needs_shape);
    assert_eq!(m.inputs[0].example, "1,4");
    let mut form = ModelForm::for_file("dyn.onnx");
    let problems = check_form(&m, &form, &[]).unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].field, Field::Shape("x".into()));
    assert!(
        problems[0]
            .message
            .contains("dynamic dimension (dim 0 = `N`)"),
        "{problems:?}"
    );
    assert!(!problems[0].message.contains("--input-shape"));

    form.shapes.insert("x".into(), "8,4".into());
    let checked = check_form(&m, &form, &[]).unwrap();
    assert_eq!(checked.input_shapes["x"], vec![8, 4]);
    assert_eq!(checked.resolved, vec![("x".to_string(), vec![8, 4])]);
    // The CLI's NAME=DIMS spelling works too.
    form.shapes.insert("x".into(), " x=2,4 ".into());
    assert_eq!(
        check_form(&m, &form, &[]).unwrap().input_shapes["x"],
        vec![2, 4]
    );

    for (typed, expect) in [
        ("8", "1 dimensions given, but the model input has 2"),
        ("8,5", "dim 1 is 5, but the model fixes it to 4"),
        ("8,a", "`a` is not a whole number"),
        ("0,4", "must be at least 1"),
    ] {
        form.shapes.insert("x".into(), typed.into());
        let problems = check_form(&m, &form, &[]).unwrap_err();
        assert_eq!(problems.len(), 1, "{typed}: {problems:?}");
        assert_eq!(problems[0].field, Field::Shape("x".into()));
        assert!(
            problems[0].message.contains(expect),
            "{typed}: {problems:?}"
        );
    }
}

#[test]
fn name_and_trials_are_checked_together() {
    let m = load("relu.onnx", &model(None, 0)).unwrap();
    let form = ModelForm {
        name: "no spaces please".into(),
        trials: "0".into(),
        shapes: BTreeMap::new(),
    };
    let problems = check_form(&m, &form, &[]).unwrap_err();
    assert_eq!(
        problems.iter().map(|p| p.field.clone()).collect::<Vec<_>>(),
        [Field::Name, Field::Trials]
    );
    assert!(
        problems[0].message.contains("may only hold"),
        "{problems:?}"
    );
    for bad in ["", "abc", "-3", "1000001"] {
        let form = ModelForm {
            trials: bad.into(),
            ..ModelForm::for_file("relu.onnx")
        };
        assert!(check_form(&m, &form, &[]).is_err(), "{bad}");
    }
    let form = ModelForm {
        name: " r1 ".into(),
        trials: " 64 ".into(),
        shapes: BTreeMap::new(),
    };
    let checked = check_form(&m, &form, &[]).unwrap();
    assert_eq!((checked.name.as_str(), checked.trials), ("r1", 64));
    let problems = check_form(&m, &form, &["r0", "r1"]).unwrap_err();
    assert_eq!(problems[0].field, Field::Name);
    assert!(
        problems[0]
            .message
            .contains("already has a model run named `r1`"),
        "{problems:?}"
    );
}

#[test]
fn files_that_are_not_models_are_refused_with_the_file_name() {
    for bytes in [
        &b"target: {kind: llvm}\nworkloads: []\n"[..],
        &b""[..],
        &b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"[..],
        &[0xff, 0xff, 0xff, 0xff, 0xff][..],
    ] {
        let e = load("bad.onnx", bytes).unwrap_err();
        assert!(e.starts_with("bad.onnx: not an ONNX model"), "{e}");
    }
}

#[test]
fn too_big_without_weights_is_refused() {
    // Integer initializers are kept: 9 MiB of int64 survives stripping.
    let m = model_with(None, &[(MAX_MODEL_BYTES / 8 + 1024, 7, 8), (1000, 1, 4)]);
    let e = load("big.onnx", &m).unwrap_err();
    assert!(e.starts_with("big.onnx: "), "{e}");
    assert!(e.contains("over the 8.0 MiB upload limit"), "{e}");
}

/// The real squeezenet of the venv's `onnx` wheel, when there is one.
#[test]
fn light_squeezenet_previews_when_the_venv_has_it() {
    let lib = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/lib");
    let Some(path) = std::fs::read_dir(lib).ok().and_then(|d| {
        d.flatten()
            .map(|e| {
                e.path()
                    .join("site-packages/onnx/backend/test/data/light/light_squeezenet.onnx")
            })
            .find(|p| p.is_file())
    }) else {
        eprintln!("SKIPPED: no .venv with onnx's light_squeezenet.onnx");
        return;
    };
    let bytes = std::fs::read(path).unwrap();
    let m = load("light_squeezenet.onnx", &bytes).unwrap();
    assert_eq!(m.inputs.len(), 1, "{:?}", m.inputs);
    assert!(!m.inputs[0].needs_shape, "{:?}", m.inputs);
    assert!(m.summary.op_types.contains_key("Conv"));
    assert!(m.report.bytes_after <= bytes.len() as u64, "{:?}", m.report);
    let checked = check_form(&m, &ModelForm::for_file("light_squeezenet.onnx"), &[]).unwrap();
    assert_eq!(checked.name, "light_squeezenet");
    eprintln!(
        "{:?} {:?} {} nodes, {} op types; {}",
        m.inputs,
        m.report,
        m.summary.nodes,
        m.op_type_count(),
        m.weights_note()
    );
}

#[test]
fn texts_read_well() {
    assert_eq!(
        accepted_text("sq"),
        "model run `sq` accepted: extracting tasks"
    );
    assert_eq!(human_bytes(512), "512 B");
    assert_eq!(human_bytes(5 * 1024 * 1024), "5.0 MiB");
}
