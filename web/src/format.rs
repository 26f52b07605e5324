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
    let local = at.0 as i64 / 1000 - tz_offset_min * 60;
    let day = local.rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", day / 3600, day % 3600 / 60, day % 60)
}

/// [`format_clock`] of a time that may not have come yet: `–` for none.
pub fn format_when(at: Option<Millis>, tz_offset_min: i64) -> String {
    at.map_or_else(|| "–".to_string(), |at| format_clock(at, tz_offset_min))
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
mod tests;
