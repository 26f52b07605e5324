#[test]
fn trials_percent_is_0_without_a_budget_and_never_over_100() {
    assert_eq!(super::trials_percent(0, 0), 0.0);
    assert_eq!(super::trials_percent(5, 20), 25.0);
    assert_eq!(super::trials_percent(30, 20), 100.0);
}

use super::*;
use tunefleet_shared::protocol::Millis;
use tunefleet_shared::target::Target;

#[test]
fn targets_read_like_tvm_options() {
    let t = Target::parse(r#"{"kind":"llvm","num-cores":2,"mcpu":"znver4"}"#).unwrap();
    assert_eq!(target_summary(&t), "llvm mcpu=znver4 num-cores=2");
    assert_eq!(target_summary(&Target::of_kind("cuda")), "cuda");
    let t = Target::parse("llvm -keys=cpu,x86").unwrap();
    assert_eq!(target_summary(&t), "llvm keys=cpu,x86");
}

#[test]
fn durations_use_two_units() {
    assert_eq!(format_duration(0), "0s");
    assert_eq!(format_duration(59_999), "59s");
    assert_eq!(format_duration(185_000), "3m 05s");
    assert_eq!(format_duration(7_800_000), "2h 10m");
    assert_eq!(format_duration(3 * 86_400_000 + 4 * 3_600_000), "3d 4h");
}

#[test]
fn clock_is_local_time() {
    // 1970-01-02 01:02:03 UTC
    let at = (86_400 + 3600 + 2 * 60 + 3) * 1000;
    assert_eq!(format_clock(Millis(at), 0), "01:02:03");
    assert_eq!(format_clock(Millis(at), -120), "03:02:03");
    assert_eq!(format_clock(Millis(at), 120), "23:02:03");
}

#[test]
fn numbers() {
    assert_eq!(format_gflops(123.4), "123");
    assert_eq!(format_gflops(12.34), "12.3");
    assert_eq!(format_gflops(1.234), "1.23");
    assert_eq!(format_flops(71_680.0), "71.680 kFLOP");
    assert_eq!(format_flops(2.0 * 128f64.powi(3)), "4.194 MFLOP");
    assert_eq!(format_flops(1.5e9), "1.500 GFLOP");
    assert_eq!(format_flops(12.0), "12 FLOP");
    assert_eq!(format_bytes(100), "100 B");
    assert_eq!(format_bytes(2048), "2.0 KB");
    assert_eq!(format_bytes(3 * 1024 * 1024), "3.0 MB");
    assert_eq!(short_id("0123456789abcdef"), "01234567");
    assert_eq!(short_id("ab"), "ab");
}
