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
mod tests;
