//! Geometry of a job's tuning curve (best latency over trials) for the SVG
//! chart in the job detail. Pure numbers and path text; the page adds the
//! `<svg>` elements and the colours (CSS).

use tunefleet_shared::model::EstimatePoint;
use tunefleet_shared::protocol::ProgressPoint;

use crate::format::format_latency;

/// Plot area inside the SVG's view box (left margin for the y labels).
pub const WIDTH: f64 = 480.0;
pub const HEIGHT: f64 = 220.0;
pub const LEFT: f64 = 64.0;
pub const RIGHT: f64 = 12.0;
pub const TOP: f64 = 10.0;
pub const BOTTOM: f64 = 28.0;

/// One labelled tick: position in view-box units and its text.
#[derive(Clone, Debug, PartialEq)]
pub struct Tick {
    pub at: f64,
    pub label: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// SVG path data of the step curve.
    pub path: String,
    /// Where the latest point is drawn.
    pub last: (f64, f64),
    pub x_ticks: Vec<Tick>,
    pub y_ticks: Vec<Tick>,
    /// The y axis is logarithmic (latencies spanning more than 10×).
    pub log: bool,
}

/// The chart for `history` on an x axis of `0..=trials_total` trials; `None`
/// without points.
pub fn latency_chart(history: &[ProgressPoint], trials_total: u32) -> Option<Chart> {
    let points: Vec<(f64, f64)> = history
        .iter()
        .filter(|p| p.best_latency_s.is_finite() && p.best_latency_s > 0.0)
        .map(|p| (f64::from(p.trials), p.best_latency_s))
        .collect();
    let first = *points.first()?;
    let x_max = points
        .iter()
        .map(|p| p.0)
        .fold(f64::from(trials_total), f64::max)
        .max(1.0);
    let (lo, hi) = points
        .iter()
        .fold((first.1, first.1), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
    let log = hi / lo >= 10.0;
    let (y0, y1) = if log {
        (lo.log10(), hi.log10())
    } else {
        let pad = ((hi - lo) * 0.1).max(hi * 0.02);
        ((lo - pad).max(0.0), hi + pad)
    };
    let (y0, y1) = if (y1 - y0).abs() < f64::EPSILON {
        (y0 - 0.5, y1 + 0.5)
    } else {
        (y0, y1)
    };
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let sx = |x: f64| LEFT + x / x_max * plot_w;
    let sy = |y: f64| {
        let v = if log { y.log10() } else { y };
        TOP + (1.0 - (v - y0) / (y1 - y0)) * plot_h
    };
    let mut path = format!("M{:.1},{:.1}", sx(first.0), sy(first.1));
    let mut prev_y = sy(first.1);
    for &(x, y) in &points[1..] {
        let (px, py) = (sx(x), sy(y));
        // Best latency so far is a step function: flat until the next improvement.
        path.push_str(&format!("H{px:.1}"));
        if (py - prev_y).abs() > 0.05 {
            path.push_str(&format!("V{py:.1}"));
        }
        prev_y = py;
    }
    let last = *points.last()?;
    let last = (sx(last.0), sy(last.1));
    let x_ticks = (0..=4)
        .map(|i| {
            let trials = (x_max * f64::from(i) / 4.0).round();
            Tick {
                at: sx(trials),
                label: format!("{trials}"),
            }
        })
        .collect();
    let y_ticks = (0..=3)
        .map(|i| {
            let v = y0 + (y1 - y0) * f64::from(i) / 3.0;
            let latency = if log { 10f64.powf(v) } else { v };
            Tick {
                at: TOP + (1.0 - f64::from(i) / 3.0) * plot_h,
                label: format_latency(latency),
            }
        })
        .collect();
    Some(Chart {
        path,
        last,
        x_ticks,
        y_ticks,
        log,
    })
}

/// The chart of a model run's estimated latency over its trials (the same
/// geometry: a step from one estimate to the next).
pub fn estimate_chart(curve: &[EstimatePoint], trials_total: u32) -> Option<Chart> {
    let points: Vec<ProgressPoint> = curve
        .iter()
        .map(|p| ProgressPoint {
            trials: p.trials,
            best_latency_s: p.estimated_latency_s,
        })
        .collect();
    latency_chart(&points, trials_total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(trials: u32, best: f64) -> ProgressPoint {
        ProgressPoint {
            trials,
            best_latency_s: best,
        }
    }

    #[test]
    fn no_points_no_chart() {
        assert_eq!(latency_chart(&[], 10), None);
        assert_eq!(latency_chart(&[p(1, f64::NAN)], 10), None);
    }

    #[test]
    fn the_curve_steps_down_and_spans_the_plot() {
        let chart = latency_chart(&[p(0, 2e-3), p(5, 1.5e-3), p(10, 1e-3)], 10).unwrap();
        assert!(!chart.log);
        assert!(
            chart.path.starts_with(&format!("M{LEFT:.1},")),
            "{}",
            chart.path
        );
        assert_eq!(chart.path.matches('H').count(), 2, "{}", chart.path);
        assert_eq!(chart.path.matches('V').count(), 2, "{}", chart.path);
        // The last point is at the right end, lower on screen than the first.
        assert!((chart.last.0 - (WIDTH - RIGHT)).abs() < 1e-9);
        assert!(chart.last.1 > TOP && chart.last.1 < HEIGHT - BOTTOM);
        assert_eq!(chart.x_ticks.len(), 5);
        assert_eq!(chart.x_ticks[4].label, "10");
        assert_eq!(chart.y_ticks.len(), 4);
        // Top tick above the highest latency, bottom tick below the lowest.
        assert!(
            chart.y_ticks[3].label.ends_with("ms"),
            "{:?}",
            chart.y_ticks
        );
    }

    #[test]
    fn wide_ranges_use_a_log_axis_and_flat_curves_still_draw() {
        let chart = latency_chart(&[p(1, 1.0), p(8, 1e-3)], 8).unwrap();
        assert!(chart.log);
        assert_eq!(chart.y_ticks[3].label, "1.000 s");
        assert_eq!(chart.y_ticks[0].label, "1.000 ms");
        let flat = latency_chart(&[p(1, 1e-3), p(4, 1e-3)], 8).unwrap();
        assert!(flat.last.1.is_finite());
        assert!(!flat.path.contains('V'));
        // Trials beyond the budget (a retried job) widen the axis.
        let over = latency_chart(&[p(12, 1e-3)], 8).unwrap();
        assert_eq!(over.x_ticks[4].label, "12");
    }

    #[test]
    fn a_model_runs_estimate_is_charted_over_its_budget() {
        let e = |trials, s| EstimatePoint {
            trials,
            at: 0,
            estimated_latency_s: s,
        };
        assert_eq!(estimate_chart(&[], 64), None);
        let c = estimate_chart(&[e(16, 3e-3), e(32, 2e-3), e(48, 1.5e-3)], 64).unwrap();
        assert_eq!(c.x_ticks[4].label, "64");
        assert!(
            c.last.0 < WIDTH - RIGHT,
            "48 of 64 trials is not the right end"
        );
        assert_eq!(
            Some(c),
            latency_chart(&[p(16, 3e-3), p(32, 2e-3), p(48, 1.5e-3)], 64)
        );
    }
}
