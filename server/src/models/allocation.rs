//! Which task of a model gets the next round of trials.
//!
//! A pure function of the tasks' weights and latency histories, so it can be
//! checked against hand-computed cases. The rule is MetaSchedule's gradient
//! task scheduler (`gradient_based.cc`, from Ansor §6), with Ansor's dead-task
//! rule and a deterministic tie-break:
//!
//! 1. **Warm-up**: every live task gets one round, in task order, before the
//!    gradient rule picks anything.
//! 2. After each finished round a task's history gains its best latency so far.
//!    For a task with `k` rounds, best `b = h[k-1]` and window `w`:
//!    `g1 = (h[k-1-w] - b) / w` when `k > w`, else 0 (the recent improvement);
//!    `g2 = b / k` (what is left to gain per round spent);
//!    `score = weight × (α·g1 + (1−α)·g2)`.
//! 3. The highest score gets the next round; equal scores go to the earlier
//!    task (MetaSchedule picks randomly; a fixed order makes runs repeatable).
//! 4. Dead tasks (no valid candidate after their first round) and trivial
//!    tasks get nothing; a task with a round in flight waits for its result,
//!    because its next round warm-starts from it.

/// α: weight of the recent improvement against the latency left.
pub const ALPHA: f64 = 0.2;
/// Rounds over which the recent improvement is measured.
pub const WINDOW: usize = 3;

/// One task as the allocator sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskStats<'a> {
    /// How often the model calls the task's function.
    pub weight: f64,
    /// Best latency (seconds) after each finished round, oldest first.
    pub history: &'a [f64],
    /// False for trivial and dead tasks.
    pub live: bool,
    /// A round of this task is queued or running.
    pub busy: bool,
}

/// The task to tune next, or `None` when no live task is free.
pub fn next_task(tasks: &[TaskStats<'_>]) -> Option<usize> {
    let free = |t: &&TaskStats<'_>| t.live && !t.busy;
    if let Some((i, _)) = tasks
        .iter()
        .enumerate()
        .find(|(_, t)| free(t) && t.history.is_empty())
    {
        return Some(i);
    }
    let mut best: Option<(usize, f64)> = None;
    for (i, task) in tasks.iter().enumerate().filter(|(_, t)| free(t)) {
        let score = score(task.weight, task.history);
        if best.is_none_or(|(_, s)| score > s) {
            best = Some((i, score));
        }
    }
    best.map(|(i, _)| i)
}

/// The gradient score of one task (see the module docs).
pub fn score(weight: f64, history: &[f64]) -> f64 {
    let k = history.len();
    let Some(&best) = history.last() else {
        return f64::INFINITY;
    };
    let g1 = if k > WINDOW {
        (history[k - 1 - WINDOW] - best) / WINDOW as f64
    } else {
        0.0
    };
    let g2 = best / k as f64;
    weight * (ALPHA * g1 + (1.0 - ALPHA) * g2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live<'a>(weight: f64, history: &'a [f64]) -> TaskStats<'a> {
        TaskStats {
            weight,
            history,
            live: true,
            busy: false,
        }
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
}
