"""Summary of scripts/bench-cost-model.sh: per run of the benchmarked model,
the trials and minutes until its estimate was within 10% of the final
estimate (the best final estimate of the runs compared, one yardstick for
all; and the run's own), the estimate at a few budgets, and what its rounds'
cost models started from.

    python scripts/bench_cost_model.py OUT_DIR [PHASE...]

PHASE defaults to every `*.json` run view in OUT_DIR except `pretrain`.
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys

WITHIN = 1.10


def first_within(curve: list, bound: float) -> dict | None:
    """The first curve point at or under `bound` from which the estimate
    stays there (it only falls, so the first such point)."""
    for p in curve:
        if p["estimated_latency_s"] <= bound:
            return p
    return None


def rounds(jobs: list) -> list:
    return [j["result"] for j in jobs if "/r" in j["name"] and j.get("result") and j["name"].startswith("bench/")]


def cost_model_line(results: list) -> str:
    summaries = [r["extra"].get("cost_model") or {} for r in results]
    used = sum(1 for s in summaries if s.get("used"))
    prep = [s["prepare_s"] for s in summaries if s.get("prepare_s") is not None]
    save = [s["save_s"] for s in summaries if s.get("save_s") is not None]
    over = [r["wall_time_s"] - r["extra"]["tune_s"] for r in results if r["extra"].get("tune_s") is not None]
    loaded = [s.get("loaded_samples", 0) for s in summaries if s.get("used")]
    med = lambda xs: f"{statistics.median(xs):.2f}" if xs else "-"  # noqa: E731
    return (f"rounds {len(results)}: started from the fleet's model {used}, samples loaded (median) "
            f"{med(loaded)}; before the search {med(prep)} s, saving {med(save)} s, "
            f"round overhead outside MetaSchedule {med(over)} s (medians)")


def main() -> None:
    out = sys.argv[1]
    phases = sys.argv[2:] or sorted(
        os.path.basename(p)[:-5] for p in glob.glob(os.path.join(out, "*.json"))
        if not p.endswith("-jobs.json") and os.path.basename(p) != "pretrain.json")
    runs = {}
    for phase in phases:
        with open(os.path.join(out, f"{phase}.json")) as f:
            view = json.load(f)
        with open(os.path.join(out, f"{phase}-jobs.json")) as f:
            jobs = json.load(f)
        runs[phase] = (view, jobs)
    finals = {p: v["curve"][-1]["estimated_latency_s"] for p, (v, _) in runs.items() if v["curve"]}
    best = min(finals.values())
    print(f"model runs {', '.join(phases)}; best final estimate {best * 1e3:.2f} ms; "
          f"'within' = estimate <= {WITHIN:.2f} x the final")
    print(f"{'run':8} {'trials':>6} {'final':>9} {'to 10% of best':>18} {'to 10% of own':>18}  estimate at 160/320/480/640 trials")
    for phase, (view, jobs) in runs.items():
        curve = view["curve"]
        start = curve[0]["at"]

        def when(bound: float) -> str:
            p = first_within(curve, bound)
            return "never" if p is None else f"{p['trials']} ({(p['at'] - start) / 60000:.0f} min)"

        def at(trials: int) -> str:
            before = [p for p in curve if p["trials"] <= trials]
            return f"{before[-1]['estimated_latency_s'] * 1e3:.1f}" if before else "-"

        print(f"{phase:8} {view['trials_done']:>6} {finals[phase] * 1e3:>7.2f}ms {when(WITHIN * best):>18} "
              f"{when(WITHIN * finals[phase]):>18}  {' / '.join(at(t) for t in (160, 320, 480, 640))} ms")
    for phase, (_, jobs) in runs.items():
        print(f"{phase}: {cost_model_line(rounds(jobs))}")
    for phase, (view, _) in runs.items():
        print(f"{phase} curve (trials, ms):",
              ", ".join(f"({p['trials']}, {p['estimated_latency_s'] * 1e3:.1f})" for p in view["curve"]))


if __name__ == "__main__":
    main()
