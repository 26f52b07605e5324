"""The fleet's shared cost model, driver side (tunefleet._driver.cost_model).

Fast checks (every run): the blob holds what TVM 0.27's XGBModel holds
(groups, features, costs, a booster that predicts the same), the caps keep
what they say, and a blob that cannot be used (a pickle, another TVM, a
zip bomb, counts that do not add up) is refused before anything is loaded.
With TUNEFLEET_SLOW=1, two real rounds through the tuning driver: the first
returns its model, the second starts from it (`used`) and returns both
tasks' samples. The fleet's own check, a model saved by one run and loaded
by the next through the master's table, is tests/tests/cost_model.rs.
"""

from __future__ import annotations

import io
import json
import os
import zipfile

import pytest
from conftest import need, slow

need("tvm", "TVM (scripts/setup-tvm.sh)")
np = need("numpy", "NumPy (with TVM)")

from tunefleet._driver import cost_model  # noqa: E402

WIDTH = 164  # TVM 0.27's per-store-feature length


def _model():
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBModel

    return XGBModel(num_warmup_samples=cost_model.WARMUP_SAMPLES, num_tuning_cores=1)


def _fill(model, groups: dict, seed: int = 0):
    """Synthetic samples: {hash: n} groups of 1-3 blocks each."""
    rng = np.random.default_rng(seed)
    inst = cost_model._inst(model)
    for group_hash, n in groups.items():
        feats = [rng.random((int(rng.integers(1, 4)), WIDTH)).astype("float32") for _ in range(n)]
        costs = (rng.random(n) * 1e-3 + 1e-5).tolist()
        cost_model._append(inst, group_hash, feats, costs)
    return inst


def test_round_trip_keeps_samples_and_booster():
    inst = _fill(_model(), {"a": 30, "b": 20})
    cost_model.retrain(inst)
    blob, meta = cost_model.encode(inst)
    assert meta["groups"] == [["a", 30], ["b", 20]] and meta["untrained"] == 0
    assert meta["feature_len"] == WIDTH
    back = cost_model._inst(_model())
    cost_model.decode(blob, back)
    assert list(back.data) == ["a", "b"] and back.data_size == 50
    for h in ("a", "b"):
        assert all(np.array_equal(x, y) for x, y in zip(inst.data[h].features, back.data[h].features))
        assert np.allclose(inst.data[h].costs, back.data[h].costs)
        assert back.data[h].min_cost == pytest.approx(inst.data[h].min_cost)
    xs = inst.data["a"].features[:5]
    assert np.allclose(inst._predict(xs), back._predict(xs)), "the booster predicts as it did"
    assert back.last_train_size == back.data_size, "trained: nothing to train again before a search"


def test_untrained_samples_are_trained_before_the_search():
    inst = _fill(_model(), {"a": 40})
    cost_model.retrain(inst)
    _fill(inst, {"a": 8}, seed=1)  # a round measured 8 more
    blob, meta = cost_model.encode(inst)
    assert meta["untrained"] == 8
    back = cost_model._inst(_model())
    cost_model.decode(blob, back)
    assert back.data_size - back.last_train_size == 8
    cost_model._train_if_stale(back)
    assert back.last_train_size == back.data_size == 48


def test_duplicate_samples_are_added_once():
    inst = _fill(_model(), {"a": 10})
    feats = list(inst.data["a"].features)
    assert cost_model._append(inst, "a", feats, [1e-3] * len(feats)) == 0
    assert inst.data_size == 10


def test_caps_keep_the_best_and_the_newest():
    inst = _fill(_model(), {"old": 100, "g": cost_model.MAX_GROUP_SAMPLES + 50})
    costs = inst.data["g"].costs
    best = set(np.argsort(costs, kind="stable")[: cost_model.KEEP_BEST].tolist())
    kept = cost_model._kept(costs)
    assert len(kept) == cost_model.MAX_GROUP_SAMPLES and best <= set(kept)
    assert len(costs) - 1 in kept, "the newest sample stays"
    blob, meta = cost_model.encode(inst, max_samples=cost_model.MAX_GROUP_SAMPLES + 10)
    assert meta["groups"] == [["old", 10], ["g", cost_model.MAX_GROUP_SAMPLES]], "older groups go first"
    back = cost_model._inst(_model())
    cost_model.decode(blob, back)
    assert back.data["g"].min_cost == pytest.approx(float(costs.min())), "the fastest sample survives"


def test_the_rounds_own_group_becomes_the_newest(tmp_path):
    model = _model()
    inst = _fill(model, {"a": 5, "b": 5})
    rnd = cost_model.Round(model=model, share=True, sizes_before={"a": 5, "b": 5})
    _fill(model, {"a": 3}, seed=2)  # what the round's search measured
    summary = cost_model.finish(rnd, str(tmp_path))
    assert summary["groups"] == 2 and summary["samples"] == 13
    with open(summary["path"], "rb") as f:
        back = cost_model._inst(_model())
        meta = cost_model.decode(f.read(), back)
    assert [h for h, _ in meta["groups"]] == ["b", "a"]
    assert inst.data_size == 13


def _npz(**arrays) -> bytes:
    out = io.BytesIO()
    np.savez_compressed(out, **arrays)
    return out.getvalue()


def _meta(**over) -> np.ndarray:
    import tvm

    meta = {"format": 1, "tvm_version": tvm.__version__, "extractor": "per-store-feature",
            "feature_len": WIDTH, "groups": [["a", 1]], "untrained": 0}
    meta.update(over)
    return np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)


def test_unusable_blobs_are_refused_whole():
    ok = {"features": np.zeros((1, WIDTH), "float32"), "blocks": np.array([1], "int32"),
          "costs": np.array([1e-3], "float32")}
    inst = cost_model._inst(_model())
    cost_model.decode(_npz(meta=_meta(), **ok), inst)
    assert inst.data_size == 1
    cases = {
        "another TVM": _npz(meta=_meta(tvm_version="0.26.0"), **ok),
        "another format": _npz(meta=_meta(format=2), **ok),
        "counts": _npz(meta=_meta(groups=[["a", 2]]), **ok),
        "a cost of zero": _npz(meta=_meta(), **{**ok, "costs": np.array([0.0], "float32")}),
        "a pickle": _npz(meta=_meta(), **{**ok, "features": np.array([{"x": 1}], dtype=object)}),
    }
    for why, blob in cases.items():
        fresh = cost_model._inst(_model())
        with pytest.raises((cost_model.Unusable, ValueError)):
            cost_model.decode(blob, fresh)
        assert fresh.data_size == 0 and not fresh.data, why
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("features.npy", b"\0" * (cost_model.MAX_UNPACKED_BYTES + 1))
    with pytest.raises(cost_model.Unusable, match="unpacks"):
        cost_model.decode(bomb.getvalue(), cost_model._inst(_model()))


def test_a_round_that_cannot_read_the_fleets_model_runs_without_it(tmp_path):
    path = tmp_path / "shared.npz"
    path.write_bytes(b"not a zip")
    rnd = cost_model.Round(model=_model(), share=True, base="abc")
    cost_model._load_shared(rnd, str(path))
    assert not rnd.used and "not used" in rnd.ignored
    summary = cost_model.finish(rnd, str(tmp_path))
    assert summary["used"] is False and summary["base"] == "abc" and summary["ignored"]


def test_two_rounds_share_one_model(tmp_path):
    """Round 1 (a matmul) returns its model; round 2 (a conv) starts from
    it and returns both workloads' samples."""
    slow("two tuning runs of 8 trials")
    from test_tune_driver import CONV, MATMUL, _job, run_driver

    events, err, rc, _, _ = run_driver(_job(MATMUL, cost_model_share={}), str(tmp_path / "r1"))
    assert rc == 0, err[-3000:]
    first = events[-1]["cost_model"]
    assert first["shared"] and not first["used"] and first["samples"] == 8 and first["groups"] == 1
    assert os.path.isfile(first["path"])
    share = {"path": first["path"], "id": "r1", "samples": first["samples"]}
    events, err, rc, _, _ = run_driver(_job(CONV, cost_model_share=share), str(tmp_path / "r2"))
    assert rc == 0, err[-3000:]
    second = events[-1]["cost_model"]
    assert second["used"] and second["base"] == "r1" and second["loaded_samples"] == 8, second
    assert second["groups"] == 2 and second["samples"] == 16, second
