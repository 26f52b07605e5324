//! Which task of a model gets the next round of trials.
//!
//! A pure function of the tasks' weights and latency histories, so it can be
//! checked against hand-computed cases. The rule is MetaSchedule's gradient
//! task scheduler (`gradient_based.cc`, from Ansor §6), with Ansor's dead-task
//! rule and a deterministic tie-break:
//!
//! 1. **Warm-up**: every live task gets one round before the gradient rule
//!    picks anything, the task that costs most untuned first (its measured
//!    default-schedule time in the model; task order among equals and
//!    where none was timed). MetaSchedule goes in task order, which on
//!    SqueezeNet left the task holding 72% of the model's time for the
//!    18th round of 22 (docs/benchmarks.md): the estimate, and a short
//!    budget's result, fall fastest this way.
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
//! 5. Only when every live task is busy and workers are idle does
//!    [`extra_round`] give a busy task another round at once (a second
//!    search from the same records with another seed): the task whose
//!    rounds in flight are fewest, then the highest score. A farm larger
//!    than the model's task count is not left idle.

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
    /// Rounds of this task queued or running.
    pub in_flight: usize,
    /// What the task costs before it is tuned (seconds per model run, its
    /// weight included), when extraction timed it.
    pub untuned_s: Option<f64>,
}

/// Most rounds of one task in flight at once: past a few, searches from
/// the same records find the same candidates.
pub const MAX_ROUNDS_AT_ONCE: usize = 4;

/// The task to tune next, or `None` when no live task is free.
pub fn next_task(tasks: &[TaskStats<'_>]) -> Option<usize> {
    let free = || tasks.iter().enumerate().filter(|(_, t)| t.free());
    // Warm-up first: the free task with no round yet that costs most
    // untuned (a task never timed counts 0: after the timed ones, in order).
    let warm_up = free()
        .filter(|(_, t)| t.history.is_empty())
        .map(|(i, t)| (i, t.untuned_s.unwrap_or(0.0)));
    first_max(warm_up).or_else(|| first_max(free().map(|(i, t)| (i, score(t.weight, t.history)))))
}

impl TaskStats<'_> {
    /// Live, with no round in flight: it may get the next round.
    fn free(&self) -> bool {
        self.live && !self.busy
    }
}

/// The index of the highest key; the earliest among equals (rule 3).
fn first_max(keys: impl Iterator<Item = (usize, f64)>) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, key) in keys {
        if best.is_none_or(|(_, b)| key > b) {
            best = Some((i, key));
        }
    }
    best.map(|(i, _)| i)
}

/// A busy task for another round at once, when no live task is free (rule
/// 5): only a task with a finished round (so the new round starts from its
/// records), fewest rounds in flight first, then the highest score.
pub fn extra_round(tasks: &[TaskStats<'_>]) -> Option<usize> {
    let mut best: Option<(usize, usize, f64)> = None;
    for (i, task) in tasks.iter().enumerate() {
        if !task.live || task.history.is_empty() || task.in_flight >= MAX_ROUNDS_AT_ONCE {
            continue;
        }
        let score = score(task.weight, task.history);
        let better = match best {
            None => true,
            Some((_, n, s)) => task.in_flight < n || (task.in_flight == n && score > s),
        };
        if better {
            best = Some((i, task.in_flight, score));
        }
    }
    best.map(|(i, _, _)| i)
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
mod tests;
