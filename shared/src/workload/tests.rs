use super::*;
use proptest::prelude::*;

const HEADER: &str = "target: {kind: llvm, num-cores: 2}\ntrials: 64\n";

fn parse(text: &str) -> Vec<Workload> {
    match parse_workload_file(text, "t.yaml") {
        Ok(w) => w,
        Err(e) => panic!("unexpected errors:\n{e}\n--- input ---\n{text}"),
    }
}

fn errors(text: &str) -> Vec<WorkloadError> {
    match parse_workload_file(text, "t.yaml") {
        Ok(w) => panic!("expected errors, parsed {w:?}\n--- input ---\n{text}"),
        Err(e) => e.errors,
    }
}

/// Exactly one error, at `line`, on `field`, whose message contains `needle`.
fn assert_one_error(text: &str, line: usize, field: &str, needle: &str) -> WorkloadError {
    let errs = errors(text);
    assert_eq!(errs.len(), 1, "expected one error, got {errs:#?}");
    let e = errs.into_iter().next().unwrap();
    assert_eq!(e.line, Some(line), "line of {e}");
    assert_eq!(e.field.as_deref(), Some(field), "field of {e}");
    assert!(
        e.message.contains(needle),
        "`{}` lacks `{needle}`",
        e.message
    );
    e
}

fn one(text: &str) -> Workload {
    let mut ws = parse(text);
    assert_eq!(ws.len(), 1);
    ws.remove(0)
}

fn with_workload(body: &str) -> String {
    format!("{HEADER}workloads:\n{body}")
}

fn example(name: &str) -> String {
    let path = format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

// ---- every op, block and flow style -------------------------------------

#[test]
fn matmul_block_and_flow() {
    let block = one(&with_workload(
        "  - name: mm\n    op: matmul\n    shape:\n      m: 128\n      n: 64\n      k: 32\n",
    ));
    let flow = one(&with_workload(
        "  - {name: mm, op: matmul, shape: {m: 128, n: 64, k: 32}}\n",
    ));
    assert_eq!(block, flow);
    assert_eq!(
        block.op,
        Op::Matmul {
            shape: MatmulShape {
                m: 128,
                n: 64,
                k: 32
            }
        }
    );
    assert_eq!(block.op_name(), "matmul");
    assert_eq!(block.shape_summary(), "m=128 n=64 k=32");
    assert_eq!(block.flops(), Some(2.0 * 128.0 * 64.0 * 32.0));
}

#[test]
fn batch_matmul_and_dense() {
    let ws = parse(&with_workload(
            "  - {name: b, op: batch_matmul, shape: {batch: 8, m: 4, n: 5, k: 6}}\n\
             \x20 - name: d\n    op: dense\n    shape: {batch: 2, in_features: 256, out_features: 128}\n",
        ));
    assert_eq!(
        ws[0].op,
        Op::BatchMatmul {
            shape: BatchMatmulShape {
                batch: 8,
                m: 4,
                n: 5,
                k: 6
            }
        }
    );
    assert_eq!(ws[0].flops(), Some(2.0 * 8.0 * 4.0 * 5.0 * 6.0));
    assert_eq!(ws[0].shape_summary(), "batch=8 m=4 n=5 k=6");
    assert_eq!(ws[1].op_name(), "dense");
    assert_eq!(ws[1].flops(), Some(2.0 * 2.0 * 256.0 * 128.0));
    assert_eq!(ws[1].shape_summary(), "batch=2 in=256 out=128");
}

#[test]
fn conv2d_nchw_pairs_and_defaults() {
    let w = one(&with_workload(
            "  - name: c\n    op: conv2d_nchw\n    shape: {batch: 1, in_channels: 64, height: 56, \
             width: 56, out_channels: 64,\n            kernel: [3, 3], stride: [1, 1], padding: [1, 1], \
             dilation: [1, 1]}\n",
        ));
    let Op::Conv2dNchw { shape } = &w.op else {
        panic!("{w:?}")
    };
    assert_eq!(shape.kernel, [3, 3]);
    assert_eq!(shape.output_size(), Some([56, 56]));
    assert_eq!(w.shape_summary(), "1x64x56x56 k3x3 s1x1 p1x1 d1x1 -> 64");
    assert_eq!(w.flops(), Some(2.0 * 64.0 * 56.0 * 56.0 * 64.0 * 3.0 * 3.0));

    // Single integers mean both axes; stride/padding/dilation default.
    let short = one(&with_workload(
        "  - name: c\n    op: conv2d_nchw\n    shape: {batch: 1, in_channels: 64, height: 56, \
             width: 56, out_channels: 64, kernel: 3, padding: 1}\n",
    ));
    assert_eq!(short.op, w.op);
    let Op::Conv2dNchw { shape } = &short.op else {
        panic!()
    };
    assert_eq!(
        (shape.stride, shape.padding, shape.dilation),
        ([1, 1], [1, 1], [1, 1])
    );
    let bare = one(&with_workload(
        "  - name: c\n    op: conv2d_nchw\n    shape: {batch: 1, in_channels: 3, height: 8, \
             width: 8, out_channels: 4, kernel: [3, 1]}\n",
    ));
    let Op::Conv2dNchw { shape } = &bare.op else {
        panic!()
    };
    assert_eq!(
        (shape.kernel, shape.stride, shape.padding, shape.dilation),
        ([3, 1], [1, 1], [0, 0], [1, 1])
    );
    assert_eq!(shape.output_size(), Some([6, 8]));
}

#[test]
fn conv2d_nhwc_and_depthwise() {
    let ws = parse(&with_workload(
        "  - name: nhwc\n    op: conv2d_nhwc\n    shape: {batch: 1, in_channels: 32, height: 28, \
             width: 28, out_channels: 64, kernel: 3, stride: 2, padding: 1}\n\
             \x20 - name: dw\n    op: depthwise_conv2d_nchw\n    shape: {batch: 1, channels: 32, \
             height: 112, width: 112, multiplier: 2, kernel: 3, stride: [2, 2], padding: 1}\n",
    ));
    assert_eq!(ws[0].op_name(), "conv2d_nhwc");
    assert_eq!(
        ws[0].shape_summary(),
        "1x28x28x32 k3x3 s2x2 p1x1 d1x1 -> 64"
    );
    let Op::Conv2dNhwc { shape } = &ws[0].op else {
        panic!()
    };
    assert_eq!(shape.output_size(), Some([14, 14]));
    assert_eq!(ws[1].op_name(), "depthwise_conv2d_nchw");
    assert_eq!(
        ws[1].shape_summary(),
        "1x32x112x112 k3x3 s2x2 p1x1 d1x1 -> 64"
    );
    assert_eq!(ws[1].flops(), Some(2.0 * 64.0 * 56.0 * 56.0 * 3.0 * 3.0));
}

#[test]
fn tvmscript_workloads() {
    let ws = parse(&with_workload(
            "  - name: s1\n    tvmscript: |\n      @T.prim_func\n      def add_one(A: T.Buffer((8,), \
             \"float32\")):\n          A[0] = A[0] + T.float32(1)\n\
             \x20 - name: s2\n    op: tvmscript\n    tvmscript: \"@T.prim_func\\r\\ndef f():\\r\\n    \
             pass\\r\\n\\n\\n\"\n",
        ));
    let Op::Tvmscript { tvmscript } = &ws[0].op else {
        panic!()
    };
    assert!(tvmscript.starts_with("@T.prim_func\ndef add_one("));
    assert!(tvmscript.ends_with("T.float32(1)\n"));
    assert_eq!(ws[0].op_name(), "tvmscript");
    assert_eq!(ws[0].flops(), None);
    assert_eq!(ws[0].shape_summary(), "tvmscript add_one (3 lines)");
    assert_eq!(ws[0].dtype, "float32");
    // Line endings and trailing blank lines are normalised.
    assert_eq!(
        ws[1].op,
        Op::Tvmscript {
            tvmscript: "@T.prim_func\ndef f():\n    pass\n".into()
        }
    );
}

// ---- defaults, overrides, targets ---------------------------------------

#[test]
fn defaults_apply() {
    let w = one(
        "target: {kind: llvm}\nworkloads:\n  - {name: a, op: matmul, shape: {m: 1, n: 2, k: 3}}\n",
    );
    assert_eq!(w.trials, DEFAULT_TRIALS);
    assert_eq!(w.dtype, DEFAULT_DTYPE);
    assert_eq!(w.target, Target::of_kind("llvm"));

    let w = one(
        "target: {kind: llvm, num-cores: 2}\ntrials: 16\ndtype: int8\nworkloads:\n  \
             - {name: a, op: matmul, shape: {m: 1, n: 2, k: 3}}\n",
    );
    assert_eq!(w.trials, 16);
    assert_eq!(w.dtype, "int8");
    assert_eq!(
        w.target,
        Target::parse(r#"{"kind":"llvm","num-cores":2}"#).unwrap()
    );
}

#[test]
fn overrides_apply() {
    let ws = parse(
        "target: {kind: llvm, num-cores: 2}\ntrials: 16\ndtype: int8\nworkloads:\n\
             \x20 - {name: a, op: matmul, shape: {m: 1, n: 2, k: 3}}\n\
             \x20 - {name: b, op: matmul, shape: {m: 1, n: 2, k: 3}, trials: 99, dtype: float16,\n\
             \x20    target: {kind: cuda, arch: sm_80}}\n",
    );
    assert_eq!((ws[0].trials, ws[0].dtype.as_str()), (16, "int8"));
    assert_eq!((ws[1].trials, ws[1].dtype.as_str()), (99, "float16"));
    assert_eq!(ws[1].target.kind(), "cuda");
    assert_eq!(ws[1].target.attrs()["arch"], serde_json::json!("sm_80"));
}

#[test]
fn legacy_target_string_converts() {
    let w = one(
        "target: \"llvm -mcpu=skylake -num-cores=4\"\nworkloads:\n  - {name: a, op: matmul, \
             shape: {m: 1, n: 2, k: 3}}\n",
    );
    assert_eq!(
        w.target,
        Target::parse(r#"{"kind":"llvm","mcpu":"skylake","num-cores":4}"#).unwrap()
    );
    // A JSON string works too, and a per-workload legacy string overrides.
    let ws = parse(
            "target: '{\"kind\": \"llvm\"}'\nworkloads:\n  - {name: a, op: matmul, shape: {m: 1, n: 2, \
             k: 3}}\n  - {name: b, op: matmul, shape: {m: 1, n: 2, k: 3}, target: llvm -num-cores=2}\n",
        );
    assert_eq!(ws[0].target, Target::of_kind("llvm"));
    assert_eq!(ws[1].target.attrs()["num-cores"], serde_json::json!(2));
}

#[test]
fn yaml_one_one_booleans_do_not_eat_keys() {
    // `n` and `y` are booleans in YAML 1.1; they must stay strings here.
    let w = one(&with_workload(
        "  - {name: n, op: matmul, shape: {n: 2, m: 1, k: 3}}\n",
    ));
    assert_eq!(w.name, "n");
}

#[test]
fn multi_document_files() {
    let ws = parse(
            "target: {kind: llvm}\nworkloads:\n  - {name: a, op: matmul, shape: {m: 1, n: 2, k: 3}}\n\
             ---\ntarget: {kind: cuda}\ntrials: 5\nworkloads:\n  - {name: b, op: matmul, shape: {m: 1, n: 2, k: 3}}\n",
        );
    assert_eq!(ws.len(), 2);
    assert_eq!(ws[0].target.kind(), "llvm");
    assert_eq!((ws[1].target.kind(), ws[1].trials), ("cuda", 5));
    // Names are unique across documents.
    let e = errors(
            "target: {kind: llvm}\nworkloads:\n  - {name: a, op: matmul, shape: {m: 1, n: 2, k: 3}}\n\
             ---\ntarget: {kind: llvm}\nworkloads:\n  - {name: a, op: matmul, shape: {m: 1, n: 2, k: 4}}\n",
        );
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].line, Some(7));
    assert!(e[0].message.contains("duplicate name"), "{}", e[0]);
}

#[test]
fn anchors_and_merge_keys_work() {
    let ws = parse(&with_workload(
        "  - &base {name: a, op: matmul, shape: {m: 1, n: 2, k: 3}}\n\
             \x20 - {<<: *base, name: b, trials: 7}\n",
    ));
    assert_eq!(ws[1].op, ws[0].op);
    assert_eq!((ws[1].name.as_str(), ws[1].trials), ("b", 7));
}

// ---- identity -------------------------------------------------------------

#[test]
fn job_id_is_stable_and_ignores_name() {
    let base = "target: {kind: llvm, num-cores: 2}\ntrials: 64\nworkloads:\n  - {name: NAME, \
                    op: matmul, shape: {m: 128, n: 128, k: 128}, dtype: float32}\n";
    let a = one(&base.replace("NAME", "first"));
    let b = one(&base.replace("NAME", "second"));
    assert_eq!(a.job_id(), b.job_id());
    assert_eq!(a.job_id().len(), 16);
    assert!(a.job_id().chars().all(|c| c.is_ascii_hexdigit()));
    // Pinned: the id is part of the database and must never drift silently.
    assert_eq!(
        a.identity_json(),
        r#"{"dtype":"float32","op":"matmul","shape":{"k":128,"m":128,"n":128},"target":{"kind":"llvm","num-cores":2},"trials":64}"#
    );
    assert_eq!(a.job_id(), "2f02e18643233976");
    // Pinned too: stored with each job, it keys the tuning cache.
    assert_eq!(a.content_key(), "d02d7f350adf4b27");
    assert_eq!(
        a.job_id_and_content_key(),
        (
            "2f02e18643233976".to_string(),
            "d02d7f350adf4b27".to_string()
        )
    );

    // Same content written differently: same id.
    let c = one(
            "trials: 64\nworkloads:\n  - name: x\n    shape: {k: 128, n: 128, m: 128}\n    op: matmul\n    \
             target: \"llvm -num-cores=2\"\n",
        );
    assert_eq!(c.job_id(), a.job_id());

    let changed = [
        base.replace("m: 128", "m: 64"),
        base.replace("num-cores: 2", "num-cores: 4"),
        base.replace("trials: 64", "trials: 65"),
        base.replace("float32", "float16"),
        base.replace(
            "op: matmul, shape: {m: 128, n: 128, k: 128}",
            "op: batch_matmul, shape: {batch: 1, m: 128, n: 128, k: 128}",
        ),
    ];
    let mut ids = vec![a.job_id()];
    for text in &changed {
        ids.push(one(&text.replace("NAME", "first")).job_id());
    }
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");
}

#[test]
fn conv_defaults_do_not_change_identity() {
    let full = one(&with_workload(
            "  - {name: a, op: conv2d_nchw, shape: {batch: 1, in_channels: 3, height: 8, width: 8, \
             out_channels: 4, kernel: [3, 3], stride: [1, 1], padding: [0, 0], dilation: [1, 1]}, dtype: float32}\n",
        ));
    let short = one(&with_workload(
        "  - {name: b, op: conv2d_nchw, shape: {batch: 1, in_channels: 3, height: 8, width: 8, \
             out_channels: 4, kernel: 3}}\n",
    ));
    assert_eq!(full.job_id(), short.job_id());
    let nhwc = one(&with_workload(
        "  - {name: b, op: conv2d_nhwc, shape: {batch: 1, in_channels: 3, height: 8, width: 8, \
             out_channels: 4, kernel: 3}}\n",
    ));
    assert_ne!(nhwc.job_id(), short.job_id());
}

// ---- wire form --------------------------------------------------------------

#[test]
fn serde_json_wire_form_is_flat_and_round_trips() {
    let w = one(&with_workload(
        "  - {name: mm128, op: matmul, shape: {m: 128, n: 128, k: 128}, dtype: float32}\n",
    ));
    let json = serde_json::to_value(&w).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"name":"mm128","op":"matmul","shape":{"m":128,"n":128,"k":128},
                "dtype":"float32","target":{"kind":"llvm","num-cores":2},"trials":64})
    );
    let back: Workload = serde_json::from_value(json).unwrap();
    assert_eq!(back, w);

    let all = parse(&example("more.yaml"));
    for w in &all {
        let text = serde_json::to_string(w).unwrap();
        let back: Workload = serde_json::from_str(&text).unwrap();
        assert_eq!(&back, w, "{text}");
        assert_eq!(back.job_id(), w.job_id());
        assert!(back.validate().is_ok());
    }
    let script = all.iter().find(|w| w.op_name() == "tvmscript").unwrap();
    let json = serde_json::to_value(script).unwrap();
    assert_eq!(json["op"], "tvmscript");
    assert!(json["tvmscript"].as_str().unwrap().contains("@T.prim_func"));
    assert!(json.get("shape").is_none());

    let conv = serde_json::json!({"name":"c","op":"conv2d_nchw","shape":{"batch":1,"in_channels":3,
            "height":8,"width":8,"out_channels":4,"kernel":[3,3],"stride":[1,1],"padding":[0,0],
            "dilation":[1,1]},"dtype":"float32","target":{"kind":"llvm"},"trials":8});
    let w: Workload = serde_json::from_value(conv.clone()).unwrap();
    assert_eq!(serde_json::to_value(&w).unwrap(), conv);
    assert!(serde_json::from_str::<Workload>(
        r#"{"name":"x","op":"nope","dtype":"float32","target":{"kind":"llvm"},"trials":1}"#
    )
    .is_err());
}

#[test]
fn validate_catches_bad_wire_workloads() {
    let w: Workload = serde_json::from_value(serde_json::json!({"name":" x","op":"conv2d_nchw",
            "shape":{"batch":0,"in_channels":3,"height":8,"width":8,"out_channels":4,"kernel":[3,3],
            "stride":[1,1],"padding":[0,0],"dilation":[1,1]},"dtype":"float8","target":{"kind":"llvm"},
            "trials":0})).unwrap();
    let errs = w.validate().unwrap_err();
    let fields: Vec<_> = errs.iter().filter_map(|e| e.field.as_deref()).collect();
    assert_eq!(fields, ["name", "dtype", "trials", "shape.batch"], "{errs}");
    let w: Workload = serde_json::from_value(serde_json::json!({"name":"x","op":"conv2d_nchw",
            "shape":{"batch":1,"in_channels":3,"height":2,"width":8,"out_channels":4,"kernel":[3,3],
            "stride":[1,1],"padding":[0,0],"dilation":[1,1]},"dtype":"float32","target":{"kind":"llvm"},
            "trials":1})).unwrap();
    let errs = w.validate().unwrap_err();
    assert_eq!(errs.first().unwrap().field.as_deref(), Some("shape.kernel"));
    assert_eq!(w.flops(), None);
}

// ---- errors: line + field + message -----------------------------------------

#[test]
fn error_display_format() {
    let e = WorkloadError {
        file: "more.yaml".into(),
        line: Some(12),
        column: Some(15),
        field: Some("workloads[1].shape.height".into()),
        message: "must be a positive integer, got -3".into(),
    };
    assert_eq!(
        e.to_string(),
        "more.yaml:12: workloads[1].shape.height: must be a positive integer, got -3"
    );
    let all = WorkloadErrors {
        errors: vec![
            e.clone(),
            WorkloadError {
                line: None,
                field: None,
                message: "boom".into(),
                ..e
            },
        ],
    };
    assert_eq!(
            all.to_string(),
            "more.yaml:12: workloads[1].shape.height: must be a positive integer, got -3\nmore.yaml: boom"
        );
}

#[test]
fn negative_dimension_points_at_the_value() {
    let text = with_workload(
            "  - name: ok\n    op: matmul\n    shape: {m: 1, n: 1, k: 1}\n  - name: bad\n    op: conv2d_nchw\n    shape:\n      batch: 1\n      in_channels: 3\n      height: -3\n      width: 8\n      out_channels: 4\n      kernel: 3\n",
        );
    let e = assert_one_error(
        &text,
        12,
        "workloads[1].shape.height",
        "must be a positive integer, got -3",
    );
    assert_eq!(e.column, Some(15));
    assert_eq!(
        e.to_string(),
        "t.yaml:12: workloads[1].shape.height: must be a positive integer, got -3"
    );
}

#[test]
fn bad_numbers() {
    for (value, needle) in [
        ("0", "must be a positive integer, got 0"),
        ("-1", "must be a positive integer, got -1"),
        ("2.5", "must be a positive integer, got 2.5"),
        ("'64'", "must be a positive integer, got \"64\""),
        ("", "must be a positive integer, got an empty value"),
        (
            "[1, 2]",
            "must be a positive integer, got a list of 2 item(s)",
        ),
        ("2000000", "must be at most 1000000, got 2000000"),
        (
            "99999999999999999999999",
            "must be a positive integer, got 1e23",
        ),
        (".nan", "must be a positive integer, got \".nan\""),
        ("true", "must be a positive integer, got true"),
    ] {
        let text = with_workload(&format!(
            "  - name: a\n    op: matmul\n    shape:\n      m: 4\n      n: {value}\n      k: 4\n"
        ));
        assert_one_error(&text, 8, "workloads[0].shape.n", needle);
    }
    // Padding may be zero, not negative; pairs report the element.
    let text = with_workload(
            "  - name: c\n    op: conv2d_nchw\n    shape: {batch: 1, in_channels: 3, height: 8, width: 8,\n            out_channels: 4, kernel: 3, padding: [0, -1], stride: [1, 2, 3]}\n",
        );
    let errs = errors(&text);
    assert_eq!(errs.len(), 2, "{errs:#?}");
    assert_eq!(
        errs[0].field.as_deref(),
        Some("workloads[0].shape.padding[1]")
    );
    assert_eq!(errs[0].column, Some(54));
    assert!(errs[0]
        .message
        .contains("must be a non-negative integer, got -1"));
    assert_eq!(errs[0].line, Some(7));
    assert_eq!(errs[1].field.as_deref(), Some("workloads[0].shape.stride"));
    assert!(errs[1].message.contains("list of two integers"));
}

#[test]
fn trials_and_dtype_and_name_rules() {
    assert_one_error(
            "target: {kind: llvm}\ntrials: 0\nworkloads:\n  - {name: a, op: matmul, shape: {m: 1, n: 1, k: 1}}\n",
            2,
            "trials",
            "must be a positive integer, got 0",
        );
    assert_one_error(
        &with_workload("  - {name: a, op: matmul, shape: {m: 1, n: 1, k: 1}, trials: 100001}\n"),
        4,
        "workloads[0].trials",
        "must be at most 100000",
    );
    assert_one_error(
        &with_workload("  - {name: a, op: matmul, shape: {m: 1, n: 1, k: 1}, dtype: flaot32}\n"),
        4,
        "workloads[0].dtype",
        "unknown dtype \"flaot32\"; did you mean `float32`? (supported: float32, ",
    );
    assert_one_error(
        &with_workload("  - {name: '  ', op: matmul, shape: {m: 1, n: 1, k: 1}}\n"),
        4,
        "workloads[0].name",
        "must not be empty",
    );
    let long = "x".repeat(MAX_NAME_CHARS + 1);
    assert_one_error(
        &with_workload(&format!(
            "  - {{name: {long}, op: matmul, shape: {{m: 1, n: 1, k: 1}}}}\n"
        )),
        4,
        "workloads[0].name",
        "at most 128 characters, got 129",
    );
    assert_one_error(
        &with_workload("  - {name: \"a\\tb\", op: matmul, shape: {m: 1, n: 1, k: 1}}\n"),
        4,
        "workloads[0].name",
        "control characters",
    );
    assert_one_error(
        &with_workload("  - {op: matmul, shape: {m: 1, n: 1, k: 1}}\n"),
        4,
        "workloads[0].name",
        "missing `name`",
    );
    // Duplicate names point at the second one and mention the first.
    assert_one_error(
            &with_workload(
                "  - {name: a, op: matmul, shape: {m: 1, n: 1, k: 1}}\n  - {name: a, op: matmul, shape: {m: 2, n: 1, k: 1}}\n",
            ),
            5,
            "workloads[1].name",
            "duplicate name \"a\" (first used at line 4)",
        );
    // Integer names are accepted as text; the name `max-length` exactly is fine.
    let w = one(&with_workload(&format!(
        "  - {{name: {}, op: matmul, shape: {{m: 1, n: 1, k: 1}}}}\n",
        "y".repeat(MAX_NAME_CHARS)
    )));
    assert_eq!(w.name.len(), MAX_NAME_CHARS);
    assert_eq!(
        one(&with_workload(
            "  - {name: 2024, op: matmul, shape: {m: 1, n: 1, k: 1}}\n"
        ))
        .name,
        "2024"
    );
}

#[test]
fn structural_errors() {
    assert_one_error(
        "target: {kind: llvm}\n",
        1,
        "workloads",
        "missing `workloads:`",
    );
    assert_one_error(
        "target: {kind: llvm}\nworkloads: []\n",
        2,
        "workloads",
        "is empty",
    );
    assert_one_error(
        "target: {kind: llvm}\nworkloads:\n",
        2,
        "workloads",
        "is empty",
    );
    assert_one_error(
        "target: {kind: llvm}\nworkloads: {a: 1}\n",
        2,
        "workloads",
        "must be a list of workloads",
    );
    let errs = errors("- name: a\n");
    assert_eq!(
        (errs.len(), errs[0].line, errs[0].field.as_deref()),
        (1, Some(1), None)
    );
    assert!(errs[0].message.contains("got a list"), "{}", errs[0]);
    let errs = errors("just a string\n");
    assert!(errs[0].message.contains("must be a mapping"), "{errs:?}");
    assert_one_error(
        &with_workload("  - 42\n"),
        4,
        "workloads[0]",
        "each workload must be a mapping",
    );
    let errs = errors("");
    assert!(errs[0].message.contains("empty"));
    let errs = errors("# only a comment\n");
    assert!(errs[0].message.contains("empty"));
}

#[test]
fn tuner_settings_from_the_file_and_the_workload() {
    let yaml = "target: {kind: llvm}\ntuner: {cost_model: random, repeat: 3}\nworkloads:\n  - name: a\n    op: matmul\n    shape: {m: 8, n: 8, k: 8}\n  - name: b\n    op: matmul\n    shape: {m: 8, n: 8, k: 9}\n    tuner: {strategy: replay-trace, repeat: 5}\n";
    let ws = parse_workload_file(yaml, "t.yaml").unwrap();
    assert_eq!(ws[0].tuner.cost_model.as_deref(), Some("random"));
    assert_eq!(ws[0].tuner.repeat, Some(3));
    assert_eq!(ws[1].tuner.strategy.as_deref(), Some("replay-trace"));
    assert_eq!(
        ws[1].tuner.cost_model.as_deref(),
        Some("random"),
        "inherited"
    );
    assert_eq!(ws[1].tuner.repeat, Some(5), "the workload's own wins");
    // Without a tuner the identity is what it always was.
    let plain = parse_workload_file(
            "target: {kind: llvm}\nworkloads:\n  - name: a\n    op: matmul\n    shape: {m: 8, n: 8, k: 8}\n",
            "t.yaml",
        )
        .unwrap();
    assert!(!plain[0].identity_json().contains("tuner"));
    assert_ne!(plain[0].job_id(), ws[0].job_id());

    let bad = "target: {kind: llvm}\nworkloads:\n  - name: a\n    op: matmul\n    shape: {m: 8, n: 8, k: 8}\n    tuner: {strategy: annealing, repeat: 0, cost: xgb}\n";
    let errs = parse_workload_file(bad, "t.yaml").unwrap_err().to_string();
    assert!(
        errs.contains("t.yaml:6") && errs.contains("workloads[0].tuner.strategy"),
        "{errs}"
    );
    assert!(errs.contains("unknown strategy `annealing`"), "{errs}");
    assert!(errs.contains("workloads[0].tuner.repeat"), "{errs}");
    assert!(
        errs.contains("cost_model"),
        "suggests the right key: {errs}"
    );

    // The rule set a CPU search uses: one of the driver's.
    let wide = "target: {kind: llvm}\ntuner: {rules: wide}\nworkloads:\n  - name: a\n    op: matmul\n    shape: {m: 8, n: 8, k: 8}\n";
    let ws = parse_workload_file(wide, "t.yaml").unwrap();
    assert_eq!(ws[0].tuner.rules.as_deref(), Some("wide"));
    let bad = wide.replace("rules: wide", "rules: fastest");
    let errs = parse_workload_file(&bad, "t.yaml").unwrap_err().to_string();
    assert!(
        errs.contains("t.yaml:2")
            && errs.contains("unknown rule set `fastest` (known: default, wide, blocked, union)"),
        "{errs}"
    );
    // `per-task` is a model run's choice, not a rule set a job can search.
    let per_task = wide.replace("rules: wide", "rules: per-task");
    let errs = parse_workload_file(&per_task, "t.yaml")
        .unwrap_err()
        .to_string();
    assert!(errs.contains("unknown rule set `per-task`"), "{errs}");
}

#[test]
fn a_model_run_may_ask_for_the_rule_set_per_task() {
    let tuner = |rules: &str| crate::model::TunerSettings {
        rules: Some(rules.into()),
        ..Default::default()
    };
    assert!(tuner("per-task").model_problems().is_empty());
    assert!(tuner("blocked").model_problems().is_empty());
    let problems = tuner("fastest").model_problems();
    assert_eq!(
        problems,
        vec![(
            "rules",
            "unknown rule set `fastest` (known: default, wide, blocked, union, per-task)"
                .to_string()
        )]
    );
}

#[test]
fn unknown_keys_with_suggestions() {
    assert_one_error(
        "target: {kind: llvm}\nworkload:\n  - {name: a, op: matmul, shape: {m: 1, n: 1, k: 1}}\n",
        2,
        "workload",
        "unknown key \"workload\"; did you mean `workloads`?",
    );
    assert_one_error(
        &with_workload("  - name: a\n    op: matmul\n    shpae: {m: 1, n: 1, k: 1}\n"),
        6,
        "workloads[0].shpae",
        "did you mean `shape`?",
    );
    assert_one_error(
        &with_workload("  - name: a\n    op: matmul\n    shape: {m: 1, n: 1, k: 1, q: 7}\n"),
        6,
        "workloads[0].shape.q",
        "unknown key \"q\" (expected one of: m, n, k)",
    );
    // A misspelt shape key is reported once (no extra "missing `height`").
    assert_one_error(
            &with_workload("  - {name: c, op: conv2d_nchw, shape: {batch: 1, in_channels: 3, hieght: 8, width: 8, out_channels: 4, kernel: 3}}\n"),
            4,
            "workloads[0].shape.hieght",
            "did you mean `height`?",
        );
    assert_one_error(
        &with_workload("  - {name: a, op: matmul, shape: {m: 1, n: 1, k: 1}, 7: x}\n"),
        4,
        "workloads[0]",
        "keys must be strings, got 7",
    );
}

#[test]
fn op_errors() {
    let e = assert_one_error(
        &with_workload("  - name: a\n    op: matmull\n    shape: {m: 1, n: 1, k: 1}\n"),
        5,
        "workloads[0].op",
        "unknown op \"matmull\"; did you mean `matmul`? (valid ops: matmul, ",
    );
    for op in OPS {
        assert!(e.message.contains(op), "{e}");
    }
    assert_one_error(
        &with_workload("  - {name: a, shape: {m: 1, n: 1, k: 1}}\n"),
        4,
        "workloads[0].op",
        "missing `op`",
    );
    assert_one_error(
        &with_workload("  - {name: a, op: matmul}\n"),
        4,
        "workloads[0].shape",
        "missing `shape` for op matmul",
    );
    assert_one_error(
        &with_workload("  - {name: a, op: matmul, shape: [1, 2, 3]}\n"),
        4,
        "workloads[0].shape",
        "must be a mapping like {m: 128, n: 128, k: 128}",
    );
    let errs = errors(&with_workload(
        "  - name: a\n    op: batch_matmul\n    shape: {m: 1, k: 1}\n",
    ));
    let fields: Vec<_> = errs.iter().map(|e| e.field.clone().unwrap()).collect();
    assert_eq!(fields, ["workloads[0].shape.batch", "workloads[0].shape.n"]);
    assert!(errs.iter().all(|e| e.line == Some(6)));
    assert_one_error(
            &with_workload("  - {name: c, op: conv2d_nchw, shape: {batch: 1, in_channels: 3, height: 8, width: 8, out_channels: 4}}\n"),
            4,
            "workloads[0].shape.kernel",
            "missing `kernel`",
        );
    assert_one_error(
            &with_workload("  - name: a\n    op: matmul\n    shape: {m: 1, n: 1, k: 1}\n    tvmscript: '@T.prim_func'\n"),
            7,
            "workloads[0].tvmscript",
            "cannot be combined with `op: matmul`",
        );
}

#[test]
fn tvmscript_errors() {
    assert_one_error(
        &with_workload("  - name: s\n    tvmscript: \"   \"\n"),
        5,
        "workloads[0].tvmscript",
        "must not be empty",
    );
    assert_one_error(
        &with_workload("  - name: s\n    tvmscript:\n"),
        5,
        "workloads[0].tvmscript",
        "must not be empty",
    );
    assert_one_error(
        &with_workload("  - name: s\n    tvmscript: |\n      def f(): pass\n"),
        6,
        "workloads[0].tvmscript",
        "must define a PrimFunc",
    );
    assert_one_error(
        &with_workload("  - name: s\n    op: tvmscript\n"),
        4,
        "workloads[0].tvmscript",
        "missing `tvmscript:`",
    );
    assert_one_error(
        &with_workload("  - name: s\n    shape: {m: 1}\n    tvmscript: '@T.prim_func'\n"),
        5,
        "workloads[0].shape",
        "is not used by a tvmscript workload",
    );
    let big = format!("@T.prim_func\\n{}", "#".repeat(MAX_TVMSCRIPT_BYTES));
    let text = with_workload(&format!("  - name: s\n    tvmscript: \"{big}\"\n"));
    assert_one_error(&text, 5, "workloads[0].tvmscript", "bytes; the limit is");
}

#[test]
fn target_errors() {
    assert_one_error(
        "trials: 4\nworkloads:\n  - name: a\n    op: matmul\n    shape: {m: 1, n: 1, k: 1}\n",
        3,
        "workloads[0].target",
        "missing `target`",
    );
    assert_one_error(
        &with_workload("  - {name: a, op: matmul, shape: {m: 1, n: 1, k: 1}, target: {mcpu: x}}\n"),
        4,
        "workloads[0].target",
        "must have a string field `kind`",
    );
    assert_one_error(
        &with_workload("  - {name: a, op: matmul, shape: {m: 1, n: 1, k: 1}, target: -mcpu=x}\n"),
        4,
        "workloads[0].target",
        "invalid target",
    );
    assert_one_error(
        &with_workload("  - {name: a, op: matmul, shape: {m: 1, n: 1, k: 1}, target: 3}\n"),
        4,
        "workloads[0].target",
        "must be a mapping like {kind: llvm",
    );
    // A bad file-level target is reported once, not once per workload.
    assert_one_error(
            "target: {kind: 3}\nworkloads:\n  - {name: a, op: matmul, shape: {m: 1, n: 1, k: 1}}\n  - {name: b, op: matmul, shape: {m: 2, n: 1, k: 1}}\n",
            1,
            "target",
            "invalid target",
        );
}

#[test]
fn geometry_errors() {
    assert_one_error(
            &with_workload("  - name: c\n    op: conv2d_nchw\n    shape:\n      batch: 1\n      in_channels: 3\n      height: 4\n      width: 8\n      out_channels: 4\n      kernel: [7, 3]\n"),
            12,
            "workloads[0].shape.kernel",
            "the output height would be empty: the kernel spans 7",
        );
    // Padding and dilation count.
    one(&with_workload("  - {name: c, op: conv2d_nchw, shape: {batch: 1, in_channels: 3, height: 4, width: 4, out_channels: 4, kernel: 7, padding: 2}}\n"));
    assert_one_error(
            &with_workload("  - {name: c, op: depthwise_conv2d_nchw, shape: {batch: 1, channels: 3, height: 9, width: 9, multiplier: 1, kernel: 3, dilation: 5}}\n"),
            4,
            "workloads[0].shape.kernel",
            "the output height and width would be empty: the kernel spans 11",
        );
    assert_one_error(
        &with_workload(
            "  - name: huge\n    op: matmul\n    shape: {m: 1000000, n: 1000000, k: 1}\n",
        ),
        6,
        "workloads[0].shape",
        "the output tensor would have 1000000000000 elements; the limit is 17179869184",
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = "target: {kind: llvm}\nbogus: 1\nworkloads:\n  - {name: a, op: matmul, shape: {m: -1, n: 1, k: 1}}\n  - {name: b, op: nope, shape: {}}\n  - {name: c, op: dense, shape: {batch: 1, in_features: 0, out_features: x}}\n  - {name: d, op: matmul, shape: {m: 1, n: 1, k: 1}, dtype: f32}\n";
    let errs = errors(text);
    let got: Vec<(Option<usize>, Option<&str>)> =
        errs.iter().map(|e| (e.line, e.field.as_deref())).collect();
    assert_eq!(
        got,
        [
            (Some(2), Some("bogus")),
            (Some(4), Some("workloads[0].shape.m")),
            (Some(5), Some("workloads[1].op")),
            (Some(6), Some("workloads[2].shape.in_features")),
            (Some(6), Some("workloads[2].shape.out_features")),
            (Some(7), Some("workloads[3].dtype")),
        ],
        "{errs:#?}"
    );
    let shown = WorkloadErrors { errors: errs }.to_string();
    assert_eq!(shown.lines().count(), 6);
    assert!(shown.starts_with("t.yaml:2: bogus: unknown key"), "{shown}");
}

#[test]
fn syntax_errors_keep_line_and_column() {
    let errs = errors("target: {kind: llvm}\nworkloads:\n  - name: a\n   op: matmul\n");
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].line.is_some() && errs[0].column.is_some(),
        "{errs:?}"
    );
    assert!(errs[0].message.starts_with("invalid YAML: "), "{}", errs[0]);
    assert_eq!(errs[0].field, None);

    let errs = errors("a: [1, 2\nb: 3\n");
    assert_eq!((errs[0].line, errs[0].column), (Some(2), Some(2)));
    let errs = errors("a: 1\na: 2\n");
    assert_eq!(errs[0].line, Some(2));
    assert!(errs[0].message.contains("duplicate"), "{}", errs[0]);
}

#[test]
fn error_count_is_capped() {
    let mut text = String::from(HEADER);
    text.push_str("workloads:\n");
    for i in 0..150 {
        text.push_str(&format!(
            "  - {{name: w{i}, op: matmul, shape: {{m: 0, n: 1, k: 1}}}}\n"
        ));
    }
    let errs = errors(&text);
    assert_eq!(errs.len(), MAX_REPORTED_ERRORS + 1);
    assert!(errs[MAX_REPORTED_ERRORS]
        .message
        .contains("50 more error(s) not shown"));
}

// ---- limits and abuse ----------------------------------------------------------

#[test]
fn oversized_input_is_refused_quickly() {
    let text = "#".repeat(20 * 1024 * 1024);
    let start = std::time::Instant::now();
    let errs = errors(&text);
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].message.contains("at most 16777216 bytes"),
        "{}",
        errs[0]
    );
    // Exactly at the limit is parsed (and fails for another reason, quickly).
    let text = format!("{}\n", "#".repeat(MAX_WORKLOAD_FILE_BYTES - 1));
    assert!(!errors(&text)[0].message.contains("bytes"));
}

#[test]
fn workload_count_is_limited() {
    let mut text = String::from(HEADER);
    text.push_str("workloads:\n");
    for i in 0..MAX_WORKLOADS_PER_FILE {
        text.push_str(&format!(
            "  - {{name: w{i}, op: conv2d_nchw, shape: {{batch: 1, in_channels: 3, height: 8, \
                 width: 8, out_channels: {}, kernel: [3, 3], stride: [1, 1], padding: [1, 1], \
                 dilation: [1, 1]}}}}\n",
            i % 1000 + 1
        ));
    }
    assert_eq!(parse(&text).len(), MAX_WORKLOADS_PER_FILE);
    text.push_str("  - {name: one-too-many, op: matmul, shape: {m: 1, n: 1, k: 1}}\n");
    let errs = errors(&text);
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].message.contains("too many workloads"),
        "{}",
        errs[0]
    );
    assert_eq!(errs[0].line, Some(MAX_WORKLOADS_PER_FILE + 4));
}

#[test]
fn deep_nesting_is_refused() {
    for text in [
        format!("a: {}{}", "[".repeat(100_000), "]".repeat(100_000)),
        format!("a: {}", "[".repeat(1_000_000)),
        format!("a: {}1{}", "{x: ".repeat(50_000), "}".repeat(50_000)),
        (0..200)
            .map(|i| format!("{}- \n", "  ".repeat(i)))
            .collect(),
        format!(
            "target: {{kind: llvm, deep: {}1{}}}\nworkloads: []\n",
            "[".repeat(MAX_YAML_DEPTH),
            "]".repeat(MAX_YAML_DEPTH)
        ),
    ] {
        let start = std::time::Instant::now();
        let errs = errors(&text);
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(errs.len(), 1, "{errs:?}");
        println!("{}", errs[0]);
    }
    // Nesting just inside the limit still parses (and does not overflow the stack).
    let depth = MAX_YAML_DEPTH - 4;
    let text = format!(
            "target: {{kind: llvm, deep: {}1{}}}\nworkloads:\n  - {{name: a, op: matmul, shape: {{m: 1, n: 1, k: 1}}}}\n",
            "[".repeat(depth),
            "]".repeat(depth)
        );
    one(&text);
}

#[test]
fn alias_bombs_are_refused() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let prev = format!("*a{}", i - 1);
        text.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            [prev.as_str(); 10].join(", ")
        ));
    }
    text.push_str("workloads: *a11\n");
    let start = std::time::Instant::now();
    let errs = errors(&text);
    assert!(start.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(errs.len(), 1);
    assert!(errs[0].message.starts_with("YAML refused: "), "{}", errs[0]);
}

#[test]
fn large_valid_scalars_are_handled() {
    // A 15 MB block of text inside the size limit: parsed and rejected by rules.
    let text = format!(
        "{HEADER}workloads:\n  - name: s\n    tvmscript: '@T.prim_func {}'\n",
        "x".repeat(15 * 1024 * 1024)
    );
    let start = std::time::Instant::now();
    assert_one_error(&text, 5, "workloads[0].tvmscript", "the limit is");
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_on_arbitrary_text(text in ".{0,400}") {
        let _ = parse_workload_file(&text, "fuzz.yaml");
    }

    #[test]
    fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse_workload_file(&text, "fuzz.yaml");
    }

    #[test]
    fn never_panics_on_yamlish_text(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("workloads:"), Just("target:"), Just("trials:"), Just("name:"),
                Just("op:"), Just("shape:"), Just("tvmscript:"), Just("kernel:"), Just("m:"),
                Just("matmul"), Just("conv2d_nchw"), Just("- "), Just("\n"), Just("  "),
                Just("{"), Just("}"), Just("["), Just("]"), Just(","), Just(": "), Just("&a "),
                Just("*a"), Just("<<: "), Just("|\n"), Just("'"), Just("\""), Just("-3"),
                Just("0"), Just("1e999"), Just("99999999999999999999"), Just("{kind: llvm}"),
                Just("---\n"), Just("? "), Just("!!str "), Just("#"), Just("\t"),
            ],
            0..80,
        )
    ) {
        let text: String = parts.concat();
        if let Err(e) = parse_workload_file(&text, "fuzz.yaml") {
            prop_assert!(!e.is_empty());
            prop_assert!(e.len() <= MAX_REPORTED_ERRORS + 1);
        }
    }

    #[test]
    fn never_panics_on_mutated_examples(
        which in 0usize..3, pos in any::<prop::sample::Index>(), len in 0usize..40,
        insert in ".{0,8}"
    ) {
        let name = ["workloads.yaml", "more.yaml", "flow-style.yaml"][which];
        let mut text = example(name);
        let mut at = pos.index(text.len() + 1);
        while !text.is_char_boundary(at) { at -= 1; }
        let mut end = (at + len).min(text.len());
        while !text.is_char_boundary(end) { end -= 1; }
        text.replace_range(at..end, &insert);
        if let Ok(ws) = parse_workload_file(&text, name) {
            for w in ws {
                let _ = (w.job_id(), w.flops(), w.shape_summary());
                prop_assert!(w.validate().is_ok(), "{:?}", w.validate());
            }
        }
    }
}

// ---- the files in examples/ ------------------------------------------------------

#[test]
fn example_files_parse() {
    let ws = parse(&example("workloads.yaml"));
    let names: Vec<_> = ws.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["mm64", "mm128", "conv3x3-small", "dense256"]);
    assert!(ws
        .iter()
        .all(|w| w.trials == 8 && w.target.kind() == "llvm"));

    let flow = parse(&example("flow-style.yaml"));
    assert_eq!(flow, ws, "flow-style.yaml must describe the same workloads");

    let more = parse(&example("more.yaml"));
    let ops: Vec<_> = more.iter().map(|w| w.op_name()).collect();
    assert_eq!(
        ops,
        [
            "batch_matmul",
            "conv2d_nhwc",
            "depthwise_conv2d_nchw",
            "matmul",
            "tvmscript"
        ]
    );
    // The legacy target string converts to the same target as the default.
    assert_eq!(more[3].target, more[0].target);
    assert_eq!(more[3].trials, 64);
    let Op::Tvmscript { tvmscript } = &more[4].op else {
        panic!()
    };
    assert!(tvmscript.contains("@T.prim_func(s_tir=True)"));
    assert!(tvmscript.contains("T.sblock(\"C\")"));
    assert!(!tvmscript
        .lines()
        .any(|l| l.starts_with("from ") || l.starts_with("import ")));
    assert_eq!(more[4].shape_summary(), "tvmscript vector_add (11 lines)");

    // Every id is distinct.
    let ids: std::collections::HashSet<_> = ws.iter().chain(&more).map(Workload::job_id).collect();
    assert_eq!(ids.len(), ws.len() + more.len());
}

#[test]
fn bad_example_files_fail_where_expected() {
    let cases = [
        ("syntax-error.yaml", 0, None, "invalid YAML"),
        (
            "unknown-op.yaml",
            7,
            Some("workloads[0].op"),
            "unknown op \"matmull\"",
        ),
        (
            "negative-shape.yaml",
            14,
            Some("workloads[1].shape.height"),
            "must be a positive integer, got -3",
        ),
        (
            "typo-key.yaml",
            7,
            Some("workloads[0].shpae"),
            "did you mean `shape`?",
        ),
        (
            "missing-target.yaml",
            9,
            Some("workloads[1].target"),
            "missing `target`",
        ),
    ];
    for (file, line, field, needle) in cases {
        let text = example(&format!("bad/{file}"));
        let errs = match parse_workload_file(&text, file) {
            Ok(w) => panic!("{file} parsed: {w:?}"),
            Err(e) => e,
        };
        let first = errs.first().unwrap();
        assert_eq!(errs.len(), 1, "{file}: {errs}");
        assert_eq!(first.field.as_deref(), field, "{file}: {first}");
        assert!(first.message.contains(needle), "{file}: {first}");
        if line > 0 {
            assert_eq!(first.line, Some(line), "{file}: {first}");
        }
        assert!(first.to_string().starts_with(file), "{first}");
        println!("{errs}");
    }
    // The expected line of the syntax error is written in the file's first comment.
    let text = example("bad/syntax-error.yaml");
    let errs = parse_workload_file(&text, "syntax-error.yaml").unwrap_err();
    let expected = text
        .lines()
        .next()
        .and_then(|l| l.split("syntax-error.yaml:").nth(1))
        .and_then(|l| l.split(':').next())
        .and_then(|n| n.parse::<usize>().ok());
    assert_eq!(errs.first().unwrap().line, expected, "{errs}");
}

#[test]
fn every_example_file_is_covered() {
    let dir = format!("{}/../examples", env!("CARGO_MANIFEST_DIR"));
    for sub in ["", "bad"] {
        let path = format!("{dir}/{sub}");
        for entry in std::fs::read_dir(&path).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".yaml") {
                continue;
            }
            let text = std::fs::read_to_string(entry.path()).unwrap();
            let result = parse_workload_file(&text, &name);
            if sub == "bad" {
                assert!(result.is_err(), "{sub}/{name} should fail");
            } else if let Err(e) = result {
                panic!("{name} should parse:\n{e}");
            }
        }
    }
}
