use super::kernel::Elem;
use super::numeric::{f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits, SplitMix64};
use super::timing::median;
use super::*;

fn matmul_args(n: i64, dtype: &str) -> Vec<ArgSpec> {
    (0..3)
        .map(|_| ArgSpec {
            shape: vec![n, n],
            dtype: dtype.to_string(),
        })
        .collect()
}

/// Short timing budget: the numbers only need to be positive here.
fn quick() -> VerifyOptions {
    VerifyOptions {
        repeat: 3,
        min_repeat_ms: 10,
        ..VerifyOptions::default()
    }
}

fn lib(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

#[test]
fn tuned_matmul_matches_reference_and_is_timed() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = fixtures::build_matmuls(dir.path(), 64, &["float32"]);
    let args = matmul_args(64, "float32");
    let v = verify_and_time(
        &lib(dir.path(), "float32-tuned.so"),
        &lib(dir.path(), "float32-reference.so"),
        "main",
        &args,
        &[2],
        &runtime,
        &VerifyOptions::default(),
    )
    .unwrap();
    eprintln!("matmul 64^3 float32: {v:?}");
    assert!(v.tuned_latency_s > 0.0 && v.tuned_latency_s < 1.0, "{v:?}");
    assert!(
        v.reference_latency_s > 0.0 && v.reference_latency_s < 1.0,
        "{v:?}"
    );
    assert!(v.max_abs_error < 1e-3, "{v:?}");
    assert_eq!(v.timer, "runtime.RPCTimeEvaluator");

    // The same through the blocking pool, with the manual timer.
    let request = VerifyRequest {
        tuned_lib: lib(dir.path(), "float32-tuned.so"),
        reference_lib: lib(dir.path(), "float32-reference.so"),
        entry: "main".into(),
        args,
        outputs: vec![2],
        runtime_lib: runtime,
        options: VerifyOptions {
            timer: TimerKind::Manual,
            ..quick()
        },
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let m = rt.block_on(request.run_blocking()).unwrap();
    eprintln!("matmul 64^3 float32, manual timer: {m:?}");
    assert_eq!(m.timer, "manual");
    assert!(
        m.tuned_latency_s > 0.0 && m.reference_latency_s > 0.0,
        "{m:?}"
    );
}

#[test]
fn wrong_kernel_is_a_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = fixtures::build_matmuls(dir.path(), 64, &["float32"]);
    let err = verify_and_time(
        &lib(dir.path(), "float32-wrong.so"),
        &lib(dir.path(), "float32-reference.so"),
        "main",
        &matmul_args(64, "float32"),
        &[2],
        &runtime,
        &quick(),
    )
    .unwrap_err();
    match &err {
        VerifyError::Mismatch {
            output,
            mismatches,
            elements,
            max_abs_error,
            tuned,
            reference,
            ..
        } => {
            assert_eq!(*output, 2);
            assert_eq!(*elements, 64 * 64);
            assert_eq!(*mismatches, 64 * 64);
            assert!((max_abs_error - 1.0).abs() < 1e-3, "{err}");
            assert!((tuned - reference - 1.0).abs() < 1e-3, "{err}");
        }
        other => panic!("expected a mismatch, got {other:?}"),
    }
    assert!(err.to_string().contains("different result"), "{err}");
}

#[test]
fn other_dtypes_match() {
    let dir = tempfile::tempdir().unwrap();
    let dtypes = ["float64", "float16", "int32", "int8"];
    let runtime = fixtures::build_matmuls(dir.path(), 32, &dtypes);
    for dtype in dtypes {
        let v = verify_and_time(
            &lib(dir.path(), &format!("{dtype}-tuned.so")),
            &lib(dir.path(), &format!("{dtype}-reference.so")),
            "main",
            &matmul_args(32, dtype),
            &[2],
            &runtime,
            &quick(),
        )
        .unwrap_or_else(|e| panic!("{dtype}: {e}"));
        if dtype.starts_with("int") {
            assert_eq!(v.max_abs_error, 0.0, "{dtype}: {v:?}");
        }
        assert!(v.tuned_latency_s > 0.0, "{dtype}: {v:?}");
    }
}

#[test]
fn load_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = fixtures::build_matmuls(dir.path(), 16, &["float32"]);
    let args = matmul_args(16, "float32");
    let reference = lib(dir.path(), "float32-reference.so");

    let err = verify_and_time(
        &lib(dir.path(), "missing.so"),
        &reference,
        "main",
        &args,
        &[2],
        &runtime,
        &quick(),
    )
    .unwrap_err();
    assert!(matches!(err, VerifyError::Load { .. }), "{err:?}");
    assert!(err.to_string().contains("missing.so"), "{err}");

    let err = verify_and_time(
        &reference,
        &reference,
        "nope",
        &args,
        &[2],
        &runtime,
        &quick(),
    )
    .unwrap_err();
    assert!(matches!(err, VerifyError::MissingEntry { .. }), "{err:?}");

    // Wrong argument count: the kernel itself rejects the call.
    let err = verify_and_time(
        &reference,
        &reference,
        "main",
        &args[..2],
        &[1],
        &runtime,
        &quick(),
    )
    .unwrap_err();
    assert!(
        matches!(err, VerifyError::Call { which: "tuned", .. }),
        "{err:?}"
    );

    // Wrong shape: likewise.
    let err = verify_and_time(
        &reference,
        &reference,
        "main",
        &matmul_args(8, "float32"),
        &[2],
        &runtime,
        &quick(),
    )
    .unwrap_err();
    assert!(matches!(err, VerifyError::Call { .. }), "{err:?}");

    let err = verify_and_time(
        &reference,
        &reference,
        "main",
        &args,
        &[2],
        &dir.path().join("libtvm_runtime_missing.so"),
        &quick(),
    );
    // Once a runtime is loaded the check happens first on the path.
    assert!(matches!(err, Err(VerifyError::Runtime { .. })), "{err:?}");
}

#[test]
fn bad_arguments_are_rejected_before_loading() {
    let nowhere = Path::new("/nonexistent/lib.so");
    let check = |args: &[ArgSpec], outputs: &[usize]| {
        verify_and_time(nowhere, nowhere, "main", args, outputs, nowhere, &quick()).unwrap_err()
    };
    let mut args = matmul_args(4, "float32");
    args[1].dtype = "bool".into();
    let err = check(&args, &[2]);
    assert!(
        matches!(&err, VerifyError::UnsupportedDtype { index: 1, dtype } if dtype == "bool"),
        "{err:?}"
    );
    assert!(err.to_string().contains("float32"), "{err}");
    args[1].dtype = "float32x4".into();
    assert!(matches!(
        check(&args, &[2]),
        VerifyError::UnsupportedDtype { .. }
    ));

    let args = matmul_args(4, "float32");
    assert!(matches!(check(&args, &[3]), VerifyError::BadArgs(_)));
    assert!(matches!(check(&args, &[]), VerifyError::BadArgs(_)));
    assert!(matches!(check(&args, &[2, 2]), VerifyError::BadArgs(_)));
    let mut empty = args.clone();
    empty[0].shape = vec![4, 0];
    assert!(matches!(check(&empty, &[2]), VerifyError::BadArgs(_)));
    let huge = matmul_args(1 << 20, "float32");
    assert!(matches!(check(&huge, &[2]), VerifyError::BadArgs(m) if m.contains("limit")));
}

#[test]
fn tolerance_scales_with_the_reduction() {
    let bytes = |xs: &[f32]| xs.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let tol = Tolerance::for_dtype("float32");
    let reference = bytes(&[0.0, 10.0]);
    // 5e-4 off near zero: too much for a short reduction, fine for k=4096.
    let tuned = bytes(&[5e-4, 10.0]);
    let short = compare(Elem::F32, &tuned, &reference, tol, 4);
    assert_eq!(short.mismatches, 1);
    assert_eq!(short.first_mismatch.map(|m| m.0), Some(0));
    let long = compare(Elem::F32, &tuned, &reference, tol, 4096);
    assert_eq!(long.mismatches, 0);
    assert!((long.max_abs_error - 5e-4).abs() < 1e-9);
    // Relative error counts only where the reference is not tiny.
    assert_eq!(long.max_rel_error, 0.0);
    // 1 % off on a large value fails whatever the reduction length.
    let tuned = bytes(&[0.0, 10.1]);
    assert_eq!(
        compare(Elem::F32, &tuned, &reference, tol, 4096).mismatches,
        1
    );
    // NaN only matches NaN.
    let nan = bytes(&[f32::NAN, 10.0]);
    assert_eq!(compare(Elem::F32, &nan, &reference, tol, 4).mismatches, 1);
    assert_eq!(compare(Elem::F32, &nan, &nan, tol, 4).mismatches, 0);
    // Integers are exact.
    let ints = |xs: &[i32]| xs.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let itol = Tolerance::for_dtype("int32");
    assert_eq!(
        compare(Elem::I32, &ints(&[1, 2]), &ints(&[1, 3]), itol, 4096).mismatches,
        1
    );
    assert_eq!(
        compare(Elem::I32, &ints(&[1, 2]), &ints(&[1, 2]), itol, 4096).mismatches,
        0
    );
}

#[test]
fn reduction_length_estimate() {
    assert_eq!(
        estimate_reduction_len(&matmul_args(64, "float32"), &[2]),
        64
    );
    let dense = vec![
        ArgSpec {
            shape: vec![1, 512],
            dtype: "float32".into(),
        },
        ArgSpec {
            shape: vec![1000, 512],
            dtype: "float32".into(),
        },
        ArgSpec {
            shape: vec![1, 1000],
            dtype: "float32".into(),
        },
    ];
    assert_eq!(estimate_reduction_len(&dense, &[2]), 512);
    let mm = |m: i64, n: i64, k: i64| {
        vec![
            ArgSpec {
                shape: vec![m, k],
                dtype: "float32".into(),
            },
            ArgSpec {
                shape: vec![k, n],
                dtype: "float32".into(),
            },
            ArgSpec {
                shape: vec![m, n],
                dtype: "float32".into(),
            },
        ]
    };
    assert_eq!(estimate_reduction_len(&mm(128, 32, 1024), &[2]), 1024);
    assert_eq!(estimate_reduction_len(&mm(1, 1, 7), &[2]), 7);
    let sum = vec![
        ArgSpec {
            shape: vec![100, 10],
            dtype: "float32".into(),
        },
        ArgSpec {
            shape: vec![100],
            dtype: "float32".into(),
        },
    ];
    assert_eq!(estimate_reduction_len(&sum, &[1]), 10);
}

#[test]
fn half_precision_conversions_round_trip() {
    for &x in &[
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        0.5,
        0.333_333_34,
        -0.999,
        65504.0,
        6.1e-5,
        1e-7,
    ] {
        let h = f16_bits_to_f32(f32_to_f16_bits(x));
        assert!((h - x).abs() <= x.abs() * 1e-3 + 6e-8, "{x} -> {h}");
        let b = f32::from_bits(u32::from(f32_to_bf16_bits(x)) << 16);
        assert!((b - x).abs() <= x.abs() * 8e-3, "{x} -> {b}");
    }
    assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
    assert_eq!(f32_to_f16_bits(-2.0), 0xc000);
    assert_eq!(f32_to_f16_bits(1e6), 0x7c00);
    assert!(f16_bits_to_f32(f32_to_f16_bits(f32::NAN)).is_nan());
}

#[test]
fn random_inputs_are_deterministic_and_in_range() {
    let mut a = Vec::new();
    let mut b = Vec::new();
    let (mut r1, mut r2) = (SplitMix64::new(7), SplitMix64::new(7));
    for _ in 0..1000 {
        Elem::F32.push_random(&mut r1, &mut a);
        Elem::F32.push_random(&mut r2, &mut b);
    }
    assert_eq!(a, b);
    assert!(a.chunks_exact(4).all(|c| {
        let x = Elem::F32.to_f64(c);
        (-1.0..1.0).contains(&x)
    }));
    let mut ints = Vec::new();
    for _ in 0..1000 {
        Elem::I8.push_random(&mut r1, &mut ints);
    }
    assert!(ints.iter().all(|&v| (-2..=2).contains(&(v as i8))));
    assert!(ints.iter().any(|&v| v as i8 == -2) && ints.iter().any(|&v| v as i8 == 2));
}

#[test]
fn median_of_samples() {
    assert_eq!(median(&mut []), None);
    let (mut odd, mut even) = ([3.0, 1.0, 2.0], [4.0, 1.0, 2.0, 3.0]);
    assert_eq!(median(&mut odd), Some(2.0));
    assert_eq!(median(&mut even), Some(2.5));
}
