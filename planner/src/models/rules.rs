//! Which schedule rules a model run's CPU round searches when the run asks
//! for the choice per task (`tuner.rules` = `per-task`; the driver's rule
//! sets are `measure.RULE_SETS`).
//!
//! Two rule sets compete and neither wins every task (docs/benchmarks.md,
//! "ResNet-50 under the blocked rules, and the rule set chosen per task"):
//! `blocked` (the whole reduction around one register tile: MLAS's
//! blocking) found faster kernels than `union` (TVM's own tiling, and the
//! same with one vector register of output channels) for most of
//! ResNet-50's 56×56 to 14×14 convolutions, and far slower ones at 7×7,
//! where a weight panel no longer stays in L2 without `union`'s cache-level
//! tiles; `union` is also the better search at a few trials a round. The
//! choice per task goes by what the task's rounds measured:
//! - its first round searches `union`, its second `blocked`;
//! - every later round searches the rule set whose structure holds the
//!   task's best record so far. The record's trace says it: `blocked`
//!   tiles as `SRS`, MetaSchedule's own rules as `SSRSRS`. Nothing about a
//!   round needs storing, so a restarted master decides the same.
//!
//! It is opt-in, and `union` alone the default: at the same budget (800
//! trials of ResNet-50, one host) `union` alone gave the faster model,
//! 1.14× onnxruntime against 1.22× and 1.27× in two runs of the choice
//! ("The rule set per task against union alone, at the same budget"). At
//! two rounds a task the `blocked` round halves the trials of `union`'s
//! space.
//!
//! Every round warm-starts from all of the task's records, so a round in
//! one rule set still evolves the other's best: the choice only says which
//! space the rest of the round's candidates are drawn from.
//!
//! Rounds of fewer than [`PER_TASK_MIN_ROUND`] trials search `union`
//! alone: at four trials a round (README's run) adding `blocked` to the
//! search gave SqueezeNet an estimate three times worse.

use serde_json::Value;
use tunefleet_shared::model::BEST_RULES;

use super::Task;

/// The smallest round (trials) that is given a `blocked` round to compare.
pub(super) const PER_TASK_MIN_ROUND: u32 = 16;
/// The rule set that tiles as MLAS does, and its tiling structure.
const BLOCKED: &str = "blocked";
const BLOCKED_STRUCTURE: &str = "SRS";

/// The rule set of `task`'s next round, in a run of `per_round` trials a
/// round that asks for the choice per task.
pub(super) fn for_round(task: &Task, per_round: u32) -> &'static str {
    if per_round < PER_TASK_MIN_ROUND {
        return BEST_RULES;
    }
    match task.rounds.len() {
        0 => BEST_RULES,
        1 => BLOCKED,
        _ => match task.records.first() {
            Some(best) if tiled_as_blocked(&best.record.record) => BLOCKED,
            Some(_) => BEST_RULES,
            // No record yet (rounds in flight or failed): take turns.
            None if task.rounds.len() % 2 == 1 => BLOCKED,
            None => BEST_RULES,
        },
    }
}

/// A MetaSchedule record whose trace tiles a block as `blocked` does.
fn tiled_as_blocked(record: &Value) -> bool {
    tiling_structure(record) == Some(BLOCKED_STRUCTURE)
}

/// The tiling structure a MetaSchedule record
/// (`[[insts, decisions], run_secs, target, args]`) annotates a block with
/// (`SRS`, `SSRSRS`), without its quotes; `None` for a trace with no tiled
/// block.
pub(super) fn tiling_structure(record: &Value) -> Option<&str> {
    let insts = record.get(0)?.get(0)?.as_array()?;
    insts.iter().find_map(|inst| {
        // ["Annotate", [block, "\"SRS\""], ["meta_schedule.tiling_structure"], []]
        let annotate = inst.get(0).and_then(Value::as_str) == Some("Annotate")
            && inst.get(2).and_then(|a| a.get(0)).and_then(Value::as_str)
                == Some("meta_schedule.tiling_structure");
        let value = inst.get(1)?.get(1)?.as_str()?;
        annotate.then(|| value.trim_matches('"'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{KeptRecord, Round};
    use tunefleet_shared::protocol::TuningRecord;

    fn record(structure: &str) -> KeptRecord {
        let trace = serde_json::json!([
            [
                ["GetSBlock", [], ["conv2d_nhwc", "main"], ["b1"]],
                [
                    "Annotate",
                    ["b1", format!("\"{structure}\"")],
                    ["meta_schedule.tiling_structure"],
                    []
                ],
            ],
            [],
        ]);
        KeptRecord::of_round(
            "job",
            0,
            TuningRecord {
                latency_s: 1e-3,
                record: serde_json::json!([trace, [1e-3], {}, []]),
            },
        )
    }

    fn task(rounds: usize, best: Option<KeptRecord>) -> Task {
        let round = Round {
            job_id: "r".to_string(),
            trials_planned: 16,
            trials_done: Some(16),
            ok: true,
        };
        Task {
            name: "conv".into(),
            weight: 1,
            tvmscript: String::new(),
            flops: None,
            untuned_share: None,
            untuned_time_s: None,
            trivial: false,
            dead: false,
            rounds: vec![round; rounds],
            history: vec![],
            workload_line: None,
            records: best.into_iter().collect(),
        }
    }

    #[test]
    fn the_first_two_rounds_compare_the_rule_sets() {
        assert_eq!(for_round(&task(0, None), 16), "union");
        assert_eq!(for_round(&task(1, Some(record("SSRSRS"))), 16), "blocked");
    }

    #[test]
    fn later_rounds_follow_the_structure_of_the_best_record() {
        assert_eq!(for_round(&task(2, Some(record("SRS"))), 16), "blocked");
        assert_eq!(for_round(&task(5, Some(record("SRS"))), 32), "blocked");
        assert_eq!(for_round(&task(2, Some(record("SSRSRS"))), 16), "union");
        // A best record with no tiled block (a pooling task): MetaSchedule's own.
        let mut pool = record("SRS");
        pool.record.record = serde_json::json!([
            [[["GetSBlock", [], ["pool", "main"], ["b0"]]], []],
            [1e-3],
            {},
            []
        ]);
        assert_eq!(for_round(&task(3, Some(pool)), 16), "union");
        // Nothing measured yet: the rule sets take turns.
        assert_eq!(for_round(&task(2, None), 16), "union");
        assert_eq!(for_round(&task(3, None), 16), "blocked");
    }

    #[test]
    fn the_tiling_structure_is_read_from_the_trace_without_quotes() {
        assert_eq!(tiling_structure(&record("SRS").record.record), Some("SRS"));
        assert_eq!(
            tiling_structure(&record("SSRSRS").record.record),
            Some("SSRSRS")
        );
        let untiled =
            serde_json::json!([[[["GetSBlock", [], ["pool", "main"], ["b0"]]], []], [1e-3]]);
        assert_eq!(tiling_structure(&untiled), None);
        assert_eq!(tiling_structure(&serde_json::json!("not a record")), None);
    }

    #[test]
    fn small_rounds_search_union_alone() {
        assert_eq!(for_round(&task(1, Some(record("SSRSRS"))), 4), "union");
        assert_eq!(for_round(&task(4, Some(record("SRS"))), 15), "union");
    }
}
