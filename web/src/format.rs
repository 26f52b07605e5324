//! Small text formatting helpers for the page (pure, tested natively).

use tunefleet_shared::protocol::Millis;

pub use tunefleet_shared::export::format_latency;
pub use web_check::workloads::target_summary;

/// `45s`, `3m 05s`, `2h 10m`, `3d 4h`: two units at most.
pub fn format_duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// `14:03:09` in local time, given the browser's offset from UTC in minutes
/// (`Date.getTimezoneOffset()`: UTC minus local, so -120 for UTC+2).
pub fn format_clock(at: Millis, tz_offset_min: i64) -> String {
    let local = at as i64 / 1000 - tz_offset_min * 60;
    let day = local.rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", day / 3600, day % 3600 / 60, day % 60)
}

/// `12.3` GFLOP/s with a precision that suits the size.
pub fn format_gflops(g: f64) -> String {
    if !g.is_finite() {
        "-".into()
    } else if g >= 100.0 {
        format!("{g:.0}")
    } else if g >= 10.0 {
        format!("{g:.1}")
    } else {
        format!("{g:.2}")
    }
}

/// `71.7 kFLOP`, `2.10 MFLOP`, `1.234 GFLOP`: a workload's work per run.
pub fn format_flops(flops: f64) -> String {
    if !flops.is_finite() || flops < 0.0 {
        return "-".into();
    }
    let (value, unit) = if flops >= 1e12 {
        (flops / 1e12, "TFLOP")
    } else if flops >= 1e9 {
        (flops / 1e9, "GFLOP")
    } else if flops >= 1e6 {
        (flops / 1e6, "MFLOP")
    } else if flops >= 1e3 {
        (flops / 1e3, "kFLOP")
    } else {
        (flops, "FLOP")
    };
    if unit == "FLOP" {
        format!("{value:.0} {unit}")
    } else {
        format!("{value:.3} {unit}")
    }
}

/// `1.2 KB`, `3.4 MB` for file sizes.
pub fn format_bytes(n: usize) -> String {
    if n < 1024 {
        format!("{n} B")
    } else if n < 1024 * 1024 {
        format!("{:.1} KB", n as f64 / 1024.0)
    } else {
        format!("{:.1} MB", n as f64 / (1024.0 * 1024.0))
    }
}

/// The first 8 hex digits of a job id, enough to tell jobs apart on screen.
pub fn short_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// How far `done` of `total` trials are, 0–100 (an overshoot shows full).
pub fn trials_percent(done: u32, total: u32) -> f64 {
    if total == 0 {
        0.0
    } else {
        (f64::from(done) / f64::from(total) * 100.0).min(100.0)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn trials_percent_is_0_without_a_budget_and_never_over_100() {
        assert_eq!(super::trials_percent(0, 0), 0.0);
        assert_eq!(super::trials_percent(5, 20), 25.0);
        assert_eq!(super::trials_percent(30, 20), 100.0);
    }

    use super::*;
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
        assert_eq!(format_clock(at, 0), "01:02:03");
        assert_eq!(format_clock(at, -120), "03:02:03");
        assert_eq!(format_clock(at, 120), "23:02:03");
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
}
