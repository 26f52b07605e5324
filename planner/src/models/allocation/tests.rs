use super::*;

fn live<'a>(weight: f64, history: &'a [f64]) -> TaskStats<'a> {
    TaskStats {
        weight,
        history,
        live: true,
        busy: false,
        in_flight: 0,
        untuned_s: None,
    }
}

fn busy<'a>(weight: f64, history: &'a [f64], in_flight: usize) -> TaskStats<'a> {
    TaskStats {
        busy: true,
        in_flight,
        ..live(weight, history)
    }
}

#[test]
fn an_extra_round_goes_to_the_busy_task_with_fewest_rounds_then_the_best_score() {
    // No extra round while a task is free: next_task has one.
    let tasks = [busy(1.0, &[1.0], 1), live(1.0, &[1.0])];
    assert_eq!(next_task(&tasks), Some(1));
    // All busy: the fewest rounds in flight wins over the score...
    let tasks = [busy(100.0, &[1.0], 2), busy(1.0, &[1.0], 1)];
    assert_eq!(next_task(&tasks), None);
    assert_eq!(extra_round(&tasks), Some(1));
    // ...and among equals, the score (weight × latency left).
    let tasks = [busy(1.0, &[1.0], 1), busy(3.0, &[1.0], 1)];
    assert_eq!(extra_round(&tasks), Some(1));
    // Never a task still in its first round (nothing to start from), a dead
    // or trivial one, or one already at the cap.
    let mut dead = busy(9.0, &[1.0], 1);
    dead.live = false;
    let tasks = [
        busy(5.0, &[], 1),
        dead,
        busy(5.0, &[1.0], MAX_ROUNDS_AT_ONCE),
    ];
    assert_eq!(extra_round(&tasks), None);
}

#[test]
fn warm_up_goes_in_task_order_before_any_second_round() {
    let tasks = [live(100.0, &[1.0]), live(1.0, &[]), live(1.0, &[])];
    assert_eq!(next_task(&tasks), Some(1));
    let mut tasks = tasks;
    tasks[1].busy = true;
    assert_eq!(next_task(&tasks), Some(2));
}

#[test]
fn warm_up_goes_to_the_costliest_untuned_task_first() {
    let timed = |weight, untuned| TaskStats {
        untuned_s: untuned,
        ..live(weight, &[])
    };
    // SqueezeNet's last convolution: 72% of the untuned model, listed late.
    let mut tasks = [
        timed(2.0, Some(0.004)),
        timed(1.0, Some(0.078)),
        timed(1.0, None),
        timed(1.0, Some(0.004)),
    ];
    assert_eq!(next_task(&tasks), Some(1));
    tasks[1].busy = true;
    // Equal costs: the earlier task.
    assert_eq!(next_task(&tasks), Some(0));
    tasks[0].busy = true;
    assert_eq!(next_task(&tasks), Some(3));
    tasks[3].busy = true;
    // Not timed: after every timed one.
    assert_eq!(next_task(&tasks), Some(2));
}

#[test]
fn hand_computed_scores() {
    // k = 1: g1 = 0, g2 = 2.0 / 1 → score = 3 × 0.8 × 2.0 = 4.8
    assert!((score(3.0, &[2.0]) - 4.8).abs() < 1e-12);
    // k = 4, w = 3: g1 = (h[0] - h[3]) / 3 = (10 - 4) / 3 = 2; g2 = 4 / 4 = 1
    // score = 2 × (0.2 × 2 + 0.8 × 1) = 2.4
    assert!((score(2.0, &[10.0, 8.0, 6.0, 4.0]) - 2.4).abs() < 1e-12);
    // k = 3 (not past the window): g1 = 0, g2 = 6 / 3 = 2 → 1 × 0.8 × 2 = 1.6
    assert!((score(1.0, &[9.0, 7.0, 6.0]) - 1.6).abs() < 1e-12);
}

#[test]
fn the_task_with_most_model_time_left_wins() {
    // a: weight 1, best 1 ms → 0.8e-3; b: weight 4, best 0.5 ms → 1.6e-3
    let a = [1e-3];
    let b = [0.5e-3];
    assert_eq!(next_task(&[live(1.0, &a), live(4.0, &b)]), Some(1));
    // b has had 2 rounds: g2 = 0.5e-3 / 2 → 4 × 0.8 × 0.25e-3 = 0.8e-3 = a's: tie → a
    let b2 = [0.5e-3, 0.5e-3];
    assert_eq!(next_task(&[live(1.0, &a), live(4.0, &b2)]), Some(0));
}

#[test]
fn recent_improvement_counts() {
    // Same best and rounds; the one still improving fast wins.
    let flat = [5e-3, 5e-3, 5e-3, 4e-3];
    let steep = [20e-3, 10e-3, 6e-3, 4e-3];
    assert_eq!(next_task(&[live(1.0, &flat), live(1.0, &steep)]), Some(1));
}

#[test]
fn dead_trivial_and_busy_tasks_get_nothing() {
    let h = [1.0];
    let mut dead = live(1000.0, &h);
    dead.live = false;
    let mut busy = live(1000.0, &h);
    busy.busy = true;
    let small = live(1.0, &h);
    assert_eq!(next_task(&[dead.clone(), busy.clone(), small]), Some(2));
    assert_eq!(next_task(&[dead, busy]), None);
    assert_eq!(next_task(&[]), None);
}

#[test]
fn exact_ties_go_to_the_earlier_task() {
    let h = [2e-3, 1e-3];
    assert_eq!(
        next_task(&[live(2.0, &h), live(2.0, &h), live(2.0, &h)]),
        Some(0)
    );
}
