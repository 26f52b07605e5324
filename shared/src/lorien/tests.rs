use super::*;
use crate::workload::{parse_workload_file, WorkloadError, MAX_REPORTED_ERRORS};
use crate::workload::{BatchMatmulShape, Conv2dShape, DenseShape, DepthwiseConv2dShape, Op};
use proptest::prelude::*;
use serde_json::Value;

const SAMPLE: &str = include_str!("../../../examples/lorien/workloads.yaml");
const BAD_SAMPLE: &str = include_str!("../../../examples/lorien/bad-unknown-task.yaml");
const NEW: &str = "!!python/object:lorien.dialect.tvm_dial.autotvm_dial.workload.AutoTVMWorkload";
const OLD: &str = "!!python/object:lorien.workload.Workload";

/// A file with one workload string per entry of `bodies` (the `{...}` part
/// after the AutoTVMWorkload tag).
fn file(bodies: &[&str]) -> String {
    let mut text = String::from("workload:\n");
    for body in bodies {
        text.push_str(&format!("- '{NEW} {}'\n", body.replace('\'', "''")));
    }
    text
}

fn item(task: &str, args: &str) -> String {
    format!("{{_primary_key: null, args: {args}, target: llvm -keys=cpu -link-params=0, task_name: {task}}}")
}

fn import(text: &str) -> Vec<Workload> {
    match import_lorien(text, "lorien.yaml", 64) {
        Ok(ws) => ws,
        Err(e) => panic!("unexpected errors:\n{e}\n--- input ---\n{text}"),
    }
}

fn errors(text: &str) -> Vec<WorkloadError> {
    match import_lorien(text, "lorien.yaml", 64) {
        Ok(ws) => panic!("expected errors, got {ws:#?}\n--- input ---\n{text}"),
        Err(e) => e.errors,
    }
}

fn one_error(text: &str) -> WorkloadError {
    let errs = errors(text);
    assert_eq!(errs.len(), 1, "{errs:#?}");
    errs.into_iter().next().unwrap()
}

fn round_trip(ws: &[Workload]) {
    let yaml = to_tunefleet_yaml_from(ws, "lorien.yaml");
    let back = parse_workload_file(&yaml, "converted.yaml")
        .unwrap_or_else(|e| panic!("{e}\n--- yaml ---\n{yaml}"));
    assert_eq!(back, ws, "{yaml}");
    let ids: Vec<String> = ws.iter().map(Workload::job_id).collect();
    let back_ids: Vec<String> = back.iter().map(Workload::job_id).collect();
    assert_eq!(ids, back_ids);
}

#[test]
fn the_sample_file_converts_to_three_convolutions() {
    assert!(is_lorien_file(SAMPLE));
    let ws = import(SAMPLE);
    assert_eq!(ws.len(), 3);
    let names: Vec<&str> = ws.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "conv2d_1x64x56x56_64x3x3_s1_p1",
            "conv2d_1x128x28x28_128x1x1_s1_p0",
            "conv2d_1x256x14x14_48x1x1_s1_p0",
        ]
    );
    let shapes: Vec<&Conv2dShape> = ws
        .iter()
        .map(|w| match &w.op {
            Op::Conv2dNchw { shape } => shape,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        *shapes[0],
        Conv2dShape {
            batch: 1,
            in_channels: 64,
            height: 56,
            width: 56,
            out_channels: 64,
            kernel: [3, 3],
            stride: [1, 1],
            padding: [1, 1],
            dilation: [1, 1],
        }
    );
    assert_eq!(
        (
            shapes[1].in_channels,
            shapes[1].out_channels,
            shapes[1].kernel
        ),
        (128, 128, [1, 1])
    );
    assert_eq!(shapes[1].padding, [0, 0]);
    assert_eq!(
        (
            shapes[2].in_channels,
            shapes[2].out_channels,
            shapes[2].height
        ),
        (256, 48, 14)
    );
    assert!(ws.iter().all(|w| w.dtype == "float32" && w.trials == 64));
    assert_eq!(
        ws[0].target,
        Target::parse(r#"{"kind":"llvm","keys":["cpu"],"link-params":0}"#).unwrap()
    );
    // The third is the older `lorien.workload.Workload` form with `lib: topi`.
    assert_eq!(
        ws[2].target,
        Target::parse(r#"{"kind":"llvm","keys":["cpu"]}"#).unwrap()
    );
    round_trip(&ws);
    let yaml = to_tunefleet_yaml_from(&ws, "lorien.yaml");
    assert!(yaml.starts_with("# Converted from lorien.yaml"), "{yaml}");
    println!("{yaml}");
}

#[test]
fn trials_are_applied_and_change_job_ids() {
    let a = import_lorien(SAMPLE, "s.yaml", 64).unwrap();
    let b = import_lorien(SAMPLE, "s.yaml", 200).unwrap();
    assert!(b.iter().all(|w| w.trials == 200));
    assert_ne!(a[0].job_id(), b[0].job_id());
    for bad in [0, MAX_TRIALS + 1] {
        let e = import_lorien(SAMPLE, "s.yaml", bad).unwrap_err();
        assert_eq!(e.first().unwrap().field.as_deref(), Some("trials"));
    }
}

#[test]
fn old_workload_form_with_lib_topi() {
    let text = format!(
            "workload:\n- '{OLD} {{args: [[TENSOR, [1, 64, 73, 73], float32], [TENSOR, [80, 64, 1, 1], float32], [1, 1], [0, 0, 0, 0], [1, 1], NCHW, NCHW, float32], lib: topi, target: llvm -keys=cpu, task_name: conv2d_NCHWc.x86}}'\n"
        );
    assert!(is_lorien_file(&text));
    let ws = import(&text);
    assert_eq!(ws[0].name, "conv2d_1x64x73x73_80x1x1_s1_p0");
    let text = text.replace("lib: topi", "lib: cblas");
    let e = one_error(&text);
    assert_eq!(e.field.as_deref(), Some("workload[0].lib"), "{e}");
}

#[test]
fn dense_mapping() {
    for task in ["dense_nopack.x86", "dense_pack.x86"] {
        let text = file(&[
                &item(
                    task,
                    "[[TENSOR, [1, 9216], float32], [TENSOR, [4096, 9216], float32], null, float32]",
                ),
                &item(
                    task,
                    "[[TENSOR, [8, 512], float16], [TENSOR, [1000, 512], float16], [TENSOR, [1000], float16], float32]",
                ),
                &item(task, "[[TENSOR, [4, 16], int8], [TENSOR, [32, 16], int8]]"),
            ]);
        let ws = import(&text);
        let shapes: Vec<(&DenseShape, &str)> = ws
            .iter()
            .map(|w| match &w.op {
                Op::Dense { shape } => (shape, w.dtype.as_str()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            shapes[0].0,
            &DenseShape {
                batch: 1,
                in_features: 9216,
                out_features: 4096
            }
        );
        assert_eq!(shapes[1].1, "float16");
        assert_eq!(shapes[1].0.out_features, 1000);
        assert_eq!(shapes[2].1, "int8");
        assert_eq!(ws[0].name, "dense_1x9216_4096");
        assert_eq!(ws[1].name, "dense_8x512_1000_float16");
        round_trip(&ws);
    }
    // K must agree.
    let e = one_error(&file(&[&item(
        "dense_pack.x86",
        "[[TENSOR, [1, 100], float32], [TENSOR, [10, 99], float32], null, float32]",
    )]));
    assert_eq!(e.field.as_deref(), Some("workload[0].args[1]"));
    assert!(e.message.contains("K = 99"), "{e}");
}

#[test]
fn batch_matmul_mapping() {
    let ws = import(&file(&[
            // Default NT: A [B, M, K], B [B, N, K].
            &item(
                "batch_matmul.x86",
                "[[TENSOR, [12, 128, 64], float32], [TENSOR, [12, 256, 64], float32]]",
            ),
            // Newer TVM: out_shape, out_dtype, transpose_a, transpose_b.
            &item(
                "batch_matmul.x86",
                "[[TENSOR, [2, 64, 32], float32], [TENSOR, [2, 64, 16], float32], [2, 32, 16], float32, true, false]",
            ),
            &item(
                "batch_matmul.x86",
                "[[TENSOR, [4, 8, 16], float32], [TENSOR, [4, 24, 16], float32], null]",
            ),
        ]));
    let shapes: Vec<&BatchMatmulShape> = ws
        .iter()
        .map(|w| match &w.op {
            Op::BatchMatmul { shape } => shape,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        shapes[0],
        &BatchMatmulShape {
            batch: 12,
            m: 128,
            n: 256,
            k: 64
        }
    );
    // transpose_a: A is [B, K, M]; transpose_b false: B is [B, K, N].
    assert_eq!(
        shapes[1],
        &BatchMatmulShape {
            batch: 2,
            m: 32,
            n: 16,
            k: 64
        }
    );
    assert_eq!((shapes[2].m, shapes[2].n, shapes[2].k), (8, 24, 16));
    assert_eq!(ws[0].name, "batch_matmul_12x128x64_256");
    round_trip(&ws);

    let errs = errors(&file(&[
        &item(
            "batch_matmul.x86",
            "[[TENSOR, [2, 8, 16], float32], [TENSOR, [1, 8, 16], float32]]",
        ),
        &item(
            "batch_matmul.x86",
            "[[TENSOR, [2, 8, 16], float32], [TENSOR, [2, 8, 15], float32]]",
        ),
        &item(
            "batch_matmul.x86",
            "[[TENSOR, [2, 8, 16], float32], [TENSOR, [2, 8, 16], float32], [2, 8, 9]]",
        ),
    ]));
    assert_eq!(errs.len(), 3, "{errs:#?}");
    assert!(errs[0].message.contains("broadcasting"), "{}", errs[0]);
    assert!(errs[1].message.contains("K = 15"), "{}", errs[1]);
    assert!(errs[2].message.contains("out_shape"), "{}", errs[2]);
    assert_eq!(
        errs.iter().map(|e| e.line).collect::<Vec<_>>(),
        [Some(2), Some(3), Some(4)]
    );
}

#[test]
fn depthwise_mapping() {
    let ws = import(&file(&[
            &item(
                "depthwise_conv2d_NCHWc.x86",
                "[[TENSOR, [1, 32, 112, 112], float32], [TENSOR, [32, 1, 3, 3], float32], [1, 1], [1, 1, 1, 1], [1, 1], NCHW, NCHW, float32]",
            ),
            // Six-argument form, multiplier 2, stride 2, dilation 2.
            &item(
                "depthwise_conv2d_nchw.x86",
                "[[TENSOR, [1, 16, 28, 28], float32], [TENSOR, [16, 2, 3, 3], float32], [2, 2], [2, 2], [2, 2], float32]",
            ),
        ]));
    let shapes: Vec<&DepthwiseConv2dShape> = ws
        .iter()
        .map(|w| match &w.op {
            Op::DepthwiseConv2dNchw { shape } => shape,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        shapes[0],
        &DepthwiseConv2dShape {
            batch: 1,
            channels: 32,
            height: 112,
            width: 112,
            multiplier: 1,
            kernel: [3, 3],
            stride: [1, 1],
            padding: [1, 1],
            dilation: [1, 1],
        }
    );
    assert_eq!(
        (shapes[1].multiplier, shapes[1].stride, shapes[1].dilation),
        (2, [2, 2], [2, 2])
    );
    assert_eq!(ws[0].name, "depthwise_conv2d_1x32x112x112_m1_3x3_s1_p1");
    assert_eq!(ws[1].name, "depthwise_conv2d_1x16x28x28_m2_3x3_s2_p2_d2");
    round_trip(&ws);

    let e = one_error(&file(&[&item(
            "depthwise_conv2d_NCHWc.x86",
            "[[TENSOR, [1, 32, 8, 8], float32], [TENSOR, [64, 1, 3, 3], float32], [1, 1], [1, 1, 1, 1], [1, 1], NCHW, NCHW, float32]",
        )]));
    assert_eq!(e.field.as_deref(), Some("workload[0].args[1]"));
    assert!(e.message.contains("64 channels"), "{e}");
}

#[test]
fn conv_argument_forms() {
    let ws = import(&file(&[
            // Scalars for strides, padding and dilation; non-square pairs.
            &item(
                "conv2d_nchw",
                "[[TENSOR, [2, 3, 224, 200], float32], [TENSOR, [16, 3, 7, 5], float32], 2, 3, 1, float32]",
            ),
            &item(
                "conv2d_nchw.x86",
                "[[TENSOR, [1, 8, 20, 20], float32], [TENSOR, [8, 8, 3, 3], float32], [2, 1], [1, 0], [1, 1], NCHW, NCHW, float32]",
            ),
            &item(
                "conv2d_NCHWc.x86",
                "[[TENSOR, [1, 8, 20, 20], float32], [TENSOR, [8, 8, 3, 3], float32], [2, 1], [1, 0, 1, 0], [1, 1], NCHW, NCHW, float32]",
            ),
        ]));
    let Op::Conv2dNchw { shape } = &ws[0].op else {
        panic!()
    };
    assert_eq!(
        (shape.stride, shape.padding, shape.kernel, shape.width),
        ([2, 2], [3, 3], [7, 5], 200)
    );
    assert_eq!(ws[0].name, "conv2d_2x3x224x200_16x7x5_s2_p3");
    assert_eq!(ws[1].name, "conv2d_1x8x20x20_8x3x3_s2x1_p1x0");
    // The same shape from another task name is the same job, under a new name.
    assert_eq!(ws[2].name, "conv2d_1x8x20x20_8x3x3_s2x1_p1x0-2");
    assert_eq!(ws[1].job_id(), ws[2].job_id());
    round_trip(&ws);
}

#[test]
fn unknown_task_name_is_an_error_with_its_line() {
    let conv = item(
            "conv2d_NCHWc.x86",
            "[[TENSOR, [1, 64, 56, 56], float32], [TENSOR, [64, 64, 3, 3], float32], [1, 1], [1, 1, 1, 1], [1, 1], NCHW, NCHW, float32]",
        );
    let winograd = conv.replace("conv2d_NCHWc.x86", "conv2d_winograd.x86");
    let text = file(&[&conv, &conv, &conv, &winograd]);
    let e = one_error(&text);
    assert_eq!(e.line, Some(5));
    assert_eq!(e.field.as_deref(), Some("workload[3]"));
    let shown = e.to_string();
    assert!(
        shown.starts_with(
            "lorien.yaml:5: workload[3]: unknown Lorien task name \"conv2d_winograd.x86\" \
                 (supported: conv2d_NCHWc.x86, "
        ),
        "{shown}"
    );
    // The example file fails the same way.
    assert!(is_lorien_file(BAD_SAMPLE));
    let errs = import_lorien(BAD_SAMPLE, "bad-unknown-task.yaml", 64).unwrap_err();
    assert_eq!(errs.len(), 1, "{errs}");
    let e = errs.first().unwrap();
    let expected_line = BAD_SAMPLE
        .lines()
        .position(|l| l.starts_with("- ") && l.contains("conv2d_nchw_winograd"))
        .map(|i| i + 1);
    assert_eq!(e.line, expected_line, "{e}");
    assert!(e.message.contains("unknown Lorien task name"), "{e}");
}

#[test]
fn asymmetric_padding_is_an_error() {
    let text = file(&[
            &item(
                "conv2d_NCHWc.x86",
                "[[TENSOR, [1, 64, 56, 56], float32], [TENSOR, [64, 64, 3, 3], float32], [1, 1], [1, 1, 1, 1], [1, 1], NCHW, NCHW, float32]",
            ),
            &item(
                "conv2d_NCHWc.x86",
                "[[TENSOR, [1, 64, 56, 56], float32], [TENSOR, [64, 64, 3, 3], float32], [2, 2], [0, 0, 1, 1], [1, 1], NCHW, NCHW, float32]",
            ),
        ]);
    let e = one_error(&text);
    assert_eq!(e.line, Some(3));
    assert_eq!(e.field.as_deref(), Some("workload[1].args[3]"));
    assert!(
        e.message.starts_with("asymmetric padding [0, 0, 1, 1]"),
        "{e}"
    );
    // Three values are not a padding form either.
    let e = one_error(&file(&[&item(
            "conv2d_nchw",
            "[[TENSOR, [1, 4, 8, 8], float32], [TENSOR, [4, 4, 3, 3], float32], 1, [1, 1, 1], 1, float32]",
        )]));
    assert!(e.message.contains("got 3 values"), "{e}");
}

#[test]
fn malformed_inner_mapping_is_an_error() {
    let mut text = file(&[&item(
        "conv2d_nchw",
        "[[TENSOR, [1, 4, 8, 8], float32], [TENSOR, [4, 4, 3, 3], float32], 1, 1, 1, float32]",
    )]);
    text.push_str(&format!(
        "- '{NEW} {{args: [[TENSOR, [1, 4], float32], task_name: x'\n"
    ));
    text.push_str(&format!("- '{NEW} [1, 2, 3]'\n"));
    text.push_str(&format!("- '{NEW} {{a: 1}} {{b: 2}}'\n"));
    text.push_str(&format!("- '{NEW}'\n"));
    text.push_str("- 42\n");
    text.push_str("- 'conv2d_nchw'\n");
    let errs = errors(&text);
    let got: Vec<(Option<usize>, Option<&str>)> =
        errs.iter().map(|e| (e.line, e.field.as_deref())).collect();
    assert_eq!(
        got,
        [
            (Some(3), Some("workload[1]")),
            (Some(4), Some("workload[2]")),
            (Some(5), Some("workload[3]")),
            (Some(6), Some("workload[4]")),
            (Some(7), Some("workload[5]")),
            (Some(8), Some("workload[6]")),
        ],
        "{errs:#?}"
    );
    assert!(
        errs[0]
            .message
            .starts_with("invalid workload mapping after the tag"),
        "{}",
        errs[0]
    );
    assert!(
        errs[1].message.contains("expected a `{...}`"),
        "{}",
        errs[1]
    );
    assert!(errs[4].message.contains("quoted string"), "{}", errs[4]);
    for e in &errs {
        println!("{e}");
    }
}

#[test]
fn missing_and_bad_fields_are_all_reported() {
    let text = file(&[
            "{args: [], task_name: conv2d_nchw}",
            "{args: [[TENSOR, [1, 4, 8, 8], float32]], target: -bad, task_name: dense_pack.x86, colour: red}",
            "{target: llvm, task_name: [x]}",
        ]);
    let errs = errors(&text);
    let got: Vec<(Option<usize>, Option<&str>)> =
        errs.iter().map(|e| (e.line, e.field.as_deref())).collect();
    assert_eq!(
        got,
        [
            (Some(2), Some("workload[0].target")),
            (Some(2), Some("workload[0].args")),
            (Some(3), Some("workload[1].colour")),
            (Some(3), Some("workload[1].target")),
            (Some(3), Some("workload[1].args")),
            (Some(4), Some("workload[2].task_name")),
            (Some(4), Some("workload[2].args")),
        ],
        "{errs:#?}"
    );
}

#[test]
fn bad_tensors_and_numbers() {
    let conv = |args: &str| item("conv2d_nchw", args);
    let errs = errors(&file(&[
            // 5-D (packed) data.
            &conv("[[TENSOR, [1, 4, 8, 8, 8], float32], [TENSOR, [4, 4, 3, 3], float32], 1, 1, 1, float32]"),
            // Zero dimension, negative padding.
            &conv("[[TENSOR, [0, 4, 8, 8], float32], [TENSOR, [4, 4, 3, 3], float32], 1, -1, 1, float32]"),
            // Unknown dtype.
            &conv("[[TENSOR, [1, 4, 8, 8], float8], [TENSOR, [4, 4, 3, 3], float8], 1, 1, 1, float32]"),
            // Mixed dtypes.
            &conv("[[TENSOR, [1, 4, 8, 8], uint8], [TENSOR, [4, 4, 3, 3], int8], 1, 1, 1, int32]"),
            // Grouped.
            &conv("[[TENSOR, [1, 4, 8, 8], float32], [TENSOR, [4, 2, 3, 3], float32], 1, 1, 1, float32]"),
            // NHWC layout.
            &conv("[[TENSOR, [1, 8, 8, 4], float32], [TENSOR, [4, 4, 3, 3], float32], 1, 1, 1, NHWC, NHWC, float32]"),
            // Empty output after conversion.
            &conv("[[TENSOR, [1, 4, 2, 2], float32], [TENSOR, [4, 4, 7, 7], float32], 1, 0, 1, float32]"),
            // Wrong argument count.
            &conv("[[TENSOR, [1, 4, 8, 8], float32]]"),
            // Too large.
            &conv("[[TENSOR, [1, 4, 8, 99999999999], float32], [TENSOR, [4, 4, 3, 3], float32], 1, 1, 1, float32]"),
            // Not a tensor.
            &conv("[[1, 4, 8, 8], [TENSOR, [4, 4, 3, 3], float32], 1, 1, 1, float32]"),
        ]));
    let fields: Vec<&str> = errs.iter().filter_map(|e| e.field.as_deref()).collect();
    assert_eq!(
        fields,
        [
            "workload[0].args[0]",
            "workload[1].args[0]",
            "workload[1].args[3]",
            "workload[2].args[0]",
            "workload[2].args[1]",
            "workload[3].args[1]",
            "workload[4].args[1]",
            "workload[5].args[5]",
            "workload[6]",
            "workload[7].args",
            "workload[8].args[0]",
            "workload[9].args[0]",
        ],
        "{errs:#?}"
    );
    assert!(errs[8]
        .message
        .contains("output height and width would be empty"));
    for e in &errs {
        println!("{e}");
    }
}

#[test]
fn nasty_tags_are_rejected_never_executed() {
    for (tag, needle) in [
            ("!!python/object/apply:os.system", "unknown tag \"!!python/object/apply:os.system\""),
            ("!!python/object/new:subprocess.Popen", "unknown tag"),
            ("!!python/name:os.system", "unknown tag"),
            ("!!python/object:os.system", "unknown Lorien class \"os.system\""),
            (
                "!!python/object:lorien.dialect.tvm_dial.auto_scheduler_dial.workload.AutoSchedulerWorkload",
                "unknown Lorien class",
            ),
            ("!shell", "unknown tag"),
        ] {
            let text = format!(
                "workload:\n- '!!python/object:lorien.workload.Workload {{args: [[TENSOR, [1, 4], float32], [TENSOR, [8, 4], float32], null, float32], lib: topi, target: llvm, task_name: dense_pack.x86}}'\n- '{tag} {{args: [rm -rf /], task_name: dense_pack.x86, target: llvm}}'\n"
            );
            assert!(is_lorien_file(&text) || tag == "!shell", "{tag}");
            let e = one_error(&text);
            assert_eq!(e.line, Some(3), "{e}");
            assert_eq!(e.field.as_deref(), Some("workload[1]"), "{e}");
            assert!(e.message.contains(needle), "{tag}: {e}");
        }
    // An apply tag with a list argument, as PyYAML writes it.
    let text = "workload:\n- '!!python/object/apply:os.system [\"touch /tmp/pwned\"]'\n";
    assert!(is_lorien_file(text));
    let e = one_error(text);
    assert!(e.message.contains("never evaluated"), "{e}");
}

#[test]
fn unquoted_tags_are_an_error_not_an_object() {
    // PyYAML-style dumps put the tag outside a string; it is not read either.
    let text = format!(
            "workload:\n- {OLD} {{args: [[TENSOR, [1, 4], float32], [TENSOR, [8, 4], float32], null, float32], lib: topi, target: llvm, task_name: dense_pack.x86}}\n"
        );
    assert!(is_lorien_file(&text));
    let e = one_error(&text);
    assert_eq!(e.line, Some(2), "{e}");
    println!("{e}");
}

#[test]
fn file_level_errors() {
    let e = one_error("workloads:\n  - {name: a}\n");
    assert!(e.message.contains("tunefleet workload file already"), "{e}");
    let e = one_error("workload: []\n");
    assert!(e.message.contains("is empty"), "{e}");
    let e = one_error("workload: 3\n");
    assert!(e.message.contains("must be a list"), "{e}");
    let e = one_error("- a\n- b\n");
    assert!(e.message.contains("expected a Lorien workload file"), "{e}");
    let e = one_error("workload: [a\n");
    assert!(e.message.starts_with("invalid YAML"), "{e}");
    let e = one_error("");
    assert!(e.message.contains("expected a Lorien workload file"), "{e}");
    let big = "#".repeat(MAX_WORKLOAD_FILE_BYTES + 1);
    assert!(one_error(&big).message.contains("16 MiB"));
    let deep = format!("workload: {}{}\n", "[".repeat(200), "]".repeat(200));
    assert!(one_error(&deep).message.starts_with("YAML refused"));
    // Other Lorien configuration keys next to `workload` are ignored.
    let text = format!("ntrial: 3000\ntuner: random\n{SAMPLE}");
    assert_eq!(import(&text).len(), 3);
}

#[test]
fn error_count_is_capped() {
    let bodies: Vec<String> = (0..150).map(|_| "{task_name: nope}".to_string()).collect();
    let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
    let errs = errors(&file(&refs));
    assert_eq!(errs.len(), MAX_REPORTED_ERRORS + 1);
    assert!(errs[MAX_REPORTED_ERRORS].message.contains("more error(s)"));
}

#[test]
fn detection() {
    assert!(is_lorien_file(SAMPLE));
    // Flow style and double quotes.
    let flow = format!(
            "{{workload: [\"{NEW} {{args: [[TENSOR, [1, 4], float32], [TENSOR, [8, 4], float32], null, float32], target: llvm, task_name: dense_pack.x86}}\"]}}\n"
        );
    assert!(is_lorien_file(&flow));
    assert_eq!(import(&flow)[0].name, "dense_1x4_8");
    // Broken YAML that still looks like Lorien.
    let broken = format!("workload:\n- '{NEW} {{args: [}}\n  - x: [\n");
    assert!(is_lorien_file(&broken));
    assert!(import_lorien(&broken, "b.yaml", 64).is_err());
    // Not Lorien: our own format (even mentioning the tag), empty text, other YAML.
    let ours = "target: {kind: llvm}\nworkloads:\n  - name: '!!python/object:x'\n    op: matmul\n    shape: {m: 1, n: 1, k: 1}\n";
    assert!(!is_lorien_file(ours));
    assert!(!is_lorien_file(""));
    assert!(!is_lorien_file("workload:\n- plain string\n"));
    assert!(!is_lorien_file("other: '!!python/object:x'\n"));
    for name in ["workloads.yaml", "more.yaml", "flow-style.yaml"] {
        let path = format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!is_lorien_file(&text), "{name}");
    }
}

#[test]
fn yaml_writer_round_trips_any_workload() {
    // Every example of our own format survives to_tunefleet_yaml.
    for name in ["workloads.yaml", "more.yaml", "flow-style.yaml"] {
        let path = format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        let ws = parse_workload_file(&text, name).unwrap();
        round_trip(&ws);
    }
    // Awkward names, target values and scripts.
    let base = import(SAMPLE).remove(0);
    let mut target = base.target.attrs().clone();
    target.insert("mcpu".into(), Value::String("true".into()));
    target.insert("odd key: #1".into(), Value::String("a, b [c] {d}".into()));
    target.insert("ratio".into(), serde_json::json!(0.25));
    target.insert("big".into(), serde_json::json!(2.0));
    target.insert(
        "nested".into(),
        serde_json::json!({"x": [1, null, false, "yes"]}),
    );
    target.insert("num-string".into(), Value::String("12".into()));
    target.insert("empty".into(), Value::String(String::new()));
    let target = Target::try_from(target).unwrap();
    let names = [
        "plain",
        "with space",
        "quote\"and\\slash",
        "null",
        "123",
        "- dash",
        "#hash",
        "émoji 🚀",
        "key: value",
        "'single'",
    ];
    let mut ws: Vec<Workload> = names
        .iter()
        .map(|n| Workload {
            name: n.to_string(),
            target: target.clone(),
            ..base.clone()
        })
        .collect();
    for script in [
        "@T.prim_func\ndef main():\n    pass\n",
        "@T.prim_func\ndef main():\n\n        T.evaluate(0)  \n    x = \"a\\tb\"\n",
        "  # indented first line prim_func\ndef f(): pass\n",
        "# comment first prim_func\n",
        "prim_func \u{1} control\n",
    ] {
        ws.push(Workload {
            name: format!("script{}", ws.len()),
            op: Op::Tvmscript {
                tvmscript: script.to_string(),
            },
            ..base.clone()
        });
    }
    round_trip(&ws);
    assert!(to_tunefleet_yaml(&ws).starts_with("# Converted from a Lorien workload file"));
    // A file name with a line break cannot escape the comment.
    let yaml = to_tunefleet_yaml_from(&ws[..1], "evil\nworkloads: []\n");
    assert_eq!(parse_workload_file(&yaml, "x.yaml").unwrap(), ws[..1]);
}

#[test]
fn converted_names_are_unique_and_valid() {
    let conv = item(
            "conv2d_NCHWc.x86",
            "[[TENSOR, [1, 64, 56, 56], float32], [TENSOR, [64, 64, 3, 3], float32], [1, 1], [1, 1, 1, 1], [1, 1], NCHW, NCHW, float32]",
        );
    let other_target = conv.replace("-link-params=0", "-mcpu=skylake");
    let ws = import(&file(&[&conv, &conv, &other_target, &conv]));
    let names: Vec<&str> = ws.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "conv2d_1x64x56x56_64x3x3_s1_p1",
            "conv2d_1x64x56x56_64x3x3_s1_p1-2",
            "conv2d_1x64x56x56_64x3x3_s1_p1-3",
            "conv2d_1x64x56x56_64x3x3_s1_p1-4",
        ]
    );
    assert_ne!(ws[0].job_id(), ws[2].job_id());
    round_trip(&ws);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_on_arbitrary_text(text in ".{0,400}") {
        let _ = is_lorien_file(&text);
        let _ = import_lorien(&text, "fuzz.yaml", 64);
    }

    #[test]
    fn never_panics_on_lorien_like_text(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("workload:"), Just("\n- '"), Just("'"), Just("!!python/object:"),
                Just(LORIEN_CLASSES[0]), Just(LORIEN_CLASSES[1]), Just(" {"), Just("}"),
                Just("args: "), Just("task_name: "), Just("target: llvm"), Just(", "),
                Just("[TENSOR, [1, 4, 8, 8], float32]"), Just("["), Just("]"), Just("-1"),
                Just("0"), Just("3"), Just("99999999999999999999"), Just("null"),
                Just("true"), Just("NCHW"), Just("conv2d_NCHWc.x86"), Just("dense_pack.x86"),
                Just("batch_matmul.x86"), Just("depthwise_conv2d_NCHWc.x86"), Just("''"),
                Just("lib: topi"), Just("&a "), Just("*a"), Just("\""), Just("#"),
            ],
            0..60,
        )
    ) {
        let text: String = parts.concat();
        let _ = is_lorien_file(&text);
        if let Err(e) = import_lorien(&text, "fuzz.yaml", 64) {
            prop_assert!(!e.is_empty());
            prop_assert!(e.len() <= MAX_REPORTED_ERRORS + 1);
        }
    }

    #[test]
    fn mutated_sample_never_panics_and_converts_validly(
        pos in any::<prop::sample::Index>(), len in 0usize..20, insert in ".{0,6}"
    ) {
        let mut text = SAMPLE.to_string();
        let mut at = pos.index(text.len() + 1);
        while !text.is_char_boundary(at) { at -= 1; }
        let mut end = (at + len).min(text.len());
        while !text.is_char_boundary(end) { end -= 1; }
        text.replace_range(at..end, &insert);
        let _ = is_lorien_file(&text);
        if let Ok(ws) = import_lorien(&text, "m.yaml", 64) {
            for w in &ws {
                prop_assert!(w.validate().is_ok(), "{:?}", w.validate());
            }
            let yaml = to_tunefleet_yaml(&ws);
            let back = parse_workload_file(&yaml, "m.yaml");
            prop_assert_eq!(back.as_ref().ok(), Some(&ws), "{}", yaml);
        }
    }
}
