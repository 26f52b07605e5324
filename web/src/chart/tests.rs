use super::*;
use tunefleet_shared::protocol::Millis;

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
        at: Millis(0),
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
