"""The fleet's cost model: one XGBoost model per effective target, carried
from round to round and from run to run (issue 39, part 4).

Why: every round of a model's task is a MetaSchedule session of its own
(`tune_tir`), and MetaSchedule's XGB cost model starts each session empty,
scoring candidates at random until it holds 100 samples, which a round of
16 trials never does. So the master keeps the newest trained model per
effective target (its `cost_models` table, SQLite or PostgreSQL), sends it
with each model round's `assign`, and keeps what the round sends back. This
module is the driver's half: load the fleet's model, add the task's own
records (the round's warm start), train once before the search, hand the
model to `tune_tir`, and write it back, bounded, for the result.

The blob is this module's own format, not `XGBModel.save`'s: that one is a
tar holding a NumPy *object* array that `XGBModel.load` reads with
`allow_pickle=True`, so a blob a worker had from the master (which had it
from another worker) could run code on it. Ours is an `.npz` read with
`allow_pickle=False`, the booster in XGBoost's own UBJSON, and the sizes
checked before anything is unpacked. Arrays (`np.savez_compressed`):

- `meta`: UTF-8 JSON as uint8: `{"format": 1, "tvm_version",
  "xgboost_version", "extractor": "per-store-feature", "feature_len",
  "groups": [[hash, samples], ...] (oldest first), "untrained"}`;
- `booster`: uint8, XGBoost UBJSON (absent while never trained);
- `features`: float32 `[blocks, feature_len]`, every sample's blocks in order;
  `blocks`: int32 `[samples]`; `costs`: float32 `[samples]` (MetaSchedule's
  median run time; 1e10 for a failed run).

Bounds: a workload group keeps its `KEEP_BEST` fastest samples and then its
newest, `MAX_GROUP_SAMPLES` in all; the model keeps the newest groups (the
round's own last) up to `MAX_SAMPLES`, and at most `MAX_BLOB_BYTES` (the
master refuses larger: `shared/src/model/cost_model.rs`). Training is
XGBoost over every sample kept, so the sample cap is also the per-round
cost of training (docs/benchmarks.md, "A cost model that learns across runs").

A model made by another TVM release (its feature extractor may differ) or
one this driver cannot read is ignored with a warning: the round runs as if
the fleet had none, and the result says why (`cost_model.ignored`).

This is tied to TVM 0.27's `XGBModel` internals (`data`, `booster`,
`_train`), as `XGBModel.save`/`load` are; a test holds it to them
(python/tests/test_cost_model.py).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import time
import zipfile
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import chain

from ..errors import shorten

FORMAT = 1
EXTRACTOR = "per-store-feature"
#: Samples a shared model keeps (its training set), and per workload group.
MAX_SAMPLES = 2048
MAX_GROUP_SAMPLES = 256
#: A group's fastest samples, always kept: its `min_cost` normalises the rest.
KEEP_BEST = 32
#: The largest blob written or read; the master's bound is the same.
MAX_BLOB_BYTES = 4 * 1024 * 1024
#: The most a blob may unpack to (a small blob must not unpack to GiBs).
MAX_UNPACKED_BYTES = 256 * 1024 * 1024
#: The model predicts (instead of scoring at random) from this many samples
#: on. MetaSchedule's default is 100, which a round never reaches alone.
WARMUP_SAMPLES = 32
#: XGBoost's threads for training and prediction. One: training on 271
#: samples took 0.43 s with one thread and 6.7 s with two on this project's
#: 2-core machine under load (OpenMP threads spinning against the other
#: processes); 2,000 samples take 3.8 s with one (docs/benchmarks.md).
TRAIN_THREADS = 1
#: The blob a round writes into its work directory for the worker.
OUT_FILE = "cost_model.npz"
#: MetaSchedule's cost of a failed run (`XGBModel.update`'s `_mean_cost`).
FAILED_COST = 1e10


class Unusable(Exception):
    """A shared model this driver will not use; the message says why."""


@dataclass
class Round:
    """A round's cost model and what it was started from."""

    model: object
    share: bool
    base: str | None = None
    used: bool = False
    ignored: str | None = None
    loaded_samples: int = 0
    warm_start_samples: int = 0
    #: Samples per group before the search, to find the groups it grew.
    sizes_before: dict = field(default_factory=dict)
    #: Seconds spent before the search (load, features, training) and after it (save).
    prepare_s: float = 0.0


def _inst(model):
    """The Python object behind MetaSchedule's derived-object wrapper."""
    return getattr(model, "_inst", model)


def _warn(text: str) -> None:
    print(f"tunefleet: warning: {text}", file=sys.stderr)


def prepare(ms, job: dict, built, work_dir: str, settings: dict, n_warm: int) -> Round | None:
    """The round's cost model, set as `settings["cost_model"]`: the fleet's
    shared model (the job's `cost_model_share.path`) when it can be used,
    the task's warm-start records added, trained before the search. None
    (MetaSchedule's own, untrained) when the job neither shares a model nor
    has records, or its cost model is not XGB."""
    share = job.get("cost_model_share")
    if share is not None and not isinstance(share, dict):
        share = None
        _warn("job field `cost_model_share` is not an object; ignored")
    if settings["cost_model"] != "xgb" or (share is None and not n_warm):
        return None
    t0 = time.monotonic()
    model = ms.cost_model.XGBModel(num_warmup_samples=WARMUP_SAMPLES, num_tuning_cores=TRAIN_THREADS)
    rnd = Round(model=model, share=share is not None)
    if share and share.get("path"):
        rnd.base = share.get("id") if isinstance(share.get("id"), str) else None
        _load_shared(rnd, share["path"])
    if n_warm:
        _add_warm_start(ms, rnd, built, work_dir, settings["max_workers"])
    inst = _inst(model)
    rnd.sizes_before = {h: len(g.costs) for h, g in inst.data.items()}
    _train_if_stale(inst)
    settings["cost_model"] = model
    rnd.prepare_s = time.monotonic() - t0
    return rnd


def _load_shared(rnd: Round, path: str) -> None:
    try:
        with open(path, "rb") as f:
            blob = f.read(MAX_BLOB_BYTES + 1)
        decode(blob, _inst(rnd.model))
    except (Unusable, OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as err:
        rnd.ignored = f"the fleet's cost model was not used: {shorten(str(err), 300)}"
        _warn(rnd.ignored)
        return
    except Exception as err:  # noqa: BLE001  (XGBoost's own errors: never fail a round over it)
        rnd.ignored = f"the fleet's cost model was not used ({type(err).__name__}: {shorten(str(err), 300)})"
        _warn(rnd.ignored)
        return
    rnd.used = True
    rnd.loaded_samples = _inst(rnd.model).data_size
    print(f"tunefleet: cost model: the fleet's ({rnd.loaded_samples} samples, "
          f"{len(_inst(rnd.model).data)} workloads)", file=sys.stderr)


def _add_warm_start(ms, rnd: Round, built, work_dir: str, num_cores: int) -> None:
    """Adds the warm start's records (already in work_dir's database) that
    the model does not hold yet: a task's records come back every round,
    and the shared model may hold them from an earlier one."""
    inst = _inst(rnd.model)
    try:
        from tvm.s_tir.meta_schedule.utils import shash2hex

        db = ms.database.JSONDatabase(work_dir=work_dir, module_equality="structural")
        records = db.get_top_k(db.commit_workload(built.mod), 100_000)
        if not records:
            return
        context = ms.TuneContext(mod=built.mod, target=built.target, space_generator="post-order-apply",
                                 search_strategy="evolutionary", task_name="main", num_threads=num_cores)
        candidates = [r.as_measure_candidate() for r in records]
        features = [x.numpy().astype("float32") for x in inst.extractor.extract_from(context, candidates)]
        costs = [_median_cost(r.run_secs) for r in records]
        _check_width(rnd, features)
        rnd.warm_start_samples = _append(inst, shash2hex(context.mod), features, costs)
    except Exception as err:  # noqa: BLE001  (a lever, never a reason to fail the round)
        _warn(f"warm-start records not added to the cost model ({type(err).__name__}: {shorten(str(err), 300)})")


def _check_width(rnd: Round, features: list) -> None:
    """A loaded model of another feature width cannot score this TVM's
    features: it is dropped (the round keeps the task's own records)."""
    inst = _inst(rnd.model)
    widths = {f.shape[1] for f in features if f.ndim == 2 and len(f)}
    held = {f.shape[1] for g in inst.data.values() for f in g.features[:1]}
    if rnd.used and widths and held and widths != held:
        rnd.used = False
        rnd.ignored = f"the fleet's cost model has {held} features per block, this TVM {widths}: not used"
        _warn(rnd.ignored)
        inst.data, inst.data_size, inst.booster, inst.last_train_size = OrderedDict(), 0, None, 0


def _median_cost(run_secs) -> float:
    import numpy as np

    secs = [float(s) for s in (run_secs or [])]
    return float(np.median(secs)) if secs else FAILED_COST


def _append(inst, group_hash: str, features: list, costs: list) -> int:
    """Adds the samples whose features the group does not hold; returns how
    many. Empty feature arrays are skipped, as `XGBModel.update` does."""
    import numpy as np
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup

    group = inst.data.get(group_hash)
    seen = {_digest(f) for f in group.features} if group is not None else set()
    new_f, new_c = [], []
    for feat, cost in zip(features, costs):
        key = _digest(feat)
        if len(feat) and key not in seen:
            seen.add(key)
            new_f.append(feat)
            new_c.append(cost)
    if not new_f:
        return 0
    new_c = np.array(new_c, dtype="float32")
    if group is None:
        inst.data[group_hash] = FeatureGroup(group_hash=group_hash, features=new_f, costs=new_c)
    else:
        group.append(new_f, new_c)
    inst.data_size += len(new_f)
    return len(new_f)


def _digest(feature) -> bytes:
    return hashlib.blake2b(feature.tobytes(), digest_size=16).digest()


def _train_if_stale(inst) -> None:
    """Trains on every sample held when some were added since the booster
    was trained (the last round's, the warm start's), so the search is
    steered by all of them. Below WARMUP_SAMPLES the model answers at
    random anyway, and MetaSchedule's own update trains it later."""
    untrained = inst.data_size - inst.last_train_size
    if inst.data_size >= WARMUP_SAMPLES and (inst.booster is None or untrained > 0):
        retrain(inst)


def retrain(inst) -> None:
    """`XGBModel.update`'s training step, on the samples held."""
    import numpy as np

    groups = list(inst.data.values())
    xs = list(chain.from_iterable(g.features for g in groups))
    with np.errstate(divide="ignore", invalid="ignore"):
        ys = np.concatenate([np.divide(g.min_cost, g.costs, out=np.zeros_like(g.costs), where=g.costs != 0)
                             for g in groups])
    inst._train(xs=xs, ys=ys)
    inst.last_train_size = inst.data_size


def finish(rnd: Round | None, work_dir: str) -> dict | None:
    """The result's `cost_model`: what the round started from and, when it
    shares the fleet's model, the model it ends with, written to
    work_dir/OUT_FILE (`path`) for the worker to send."""
    if rnd is None:
        return None
    summary = {
        "shared": rnd.share,
        "used": rnd.used,
        # The model the round was sent, used or not: a master that finds
        # its model unusable to a worker replaces it.
        "base": rnd.base,
        "ignored": rnd.ignored,
        "loaded_samples": rnd.loaded_samples,
        "warm_start_samples": rnd.warm_start_samples,
        "prepare_s": round(rnd.prepare_s, 3),
    }
    if not rnd.share:
        return summary
    inst = _inst(rnd.model)
    t0 = time.monotonic()
    try:
        for group_hash in [h for h, g in inst.data.items() if len(g.costs) != rnd.sizes_before.get(h)]:
            inst.data.move_to_end(group_hash)  # the round's own group is the newest
        blob, meta = encode(inst)
        path = os.path.abspath(os.path.join(work_dir, OUT_FILE))
        with open(path, "wb") as f:
            f.write(blob)
    except Exception as err:  # noqa: BLE001  (the round's records matter more than its model)
        _warn(f"cost model not returned ({type(err).__name__}: {shorten(str(err), 300)})")
        return summary
    summary.update(path=path, bytes=len(blob), samples=sum(n for _, n in meta["groups"]),
                   groups=len(meta["groups"]), untrained=meta["untrained"],
                   save_s=round(time.monotonic() - t0, 3))
    return summary


def _kept(costs) -> list:
    """Indices a group keeps: its KEEP_BEST fastest, then its newest, in
    their original order."""
    import numpy as np

    n = len(costs)
    if n <= MAX_GROUP_SAMPLES:
        return list(range(n))
    best = set(np.argsort(costs, kind="stable")[:KEEP_BEST].tolist())
    newest = [i for i in range(n - 1, -1, -1) if i not in best][: MAX_GROUP_SAMPLES - len(best)]
    return sorted(best | set(newest))


def encode(inst, max_samples: int = MAX_SAMPLES) -> tuple[bytes, dict]:
    """The model as a blob (see the module's docs) and its `meta`: the
    newest groups up to `max_samples`, fewer while the blob is over
    MAX_BLOB_BYTES."""
    while True:
        blob, meta = _encode_once(inst, max_samples)
        if len(blob) <= MAX_BLOB_BYTES or max_samples <= MAX_GROUP_SAMPLES:
            return blob, meta
        max_samples //= 2


def _encode_once(inst, max_samples: int) -> tuple[bytes, dict]:
    import numpy as np
    import tvm
    import xgboost

    kept, total = [], 0
    for group in reversed(list(inst.data.values())):
        room = max_samples - total
        if room <= 0:
            break
        idx = _kept(group.costs)[-room:]
        kept.append((group.group_hash, [group.features[i] for i in idx], np.asarray(group.costs)[idx]))
        total += len(idx)
    kept.reverse()
    feats = [f for _, fs, _ in kept for f in fs]
    width = feats[0].shape[1] if feats else 0
    meta = {
        "format": FORMAT,
        "tvm_version": tvm.__version__,
        "xgboost_version": xgboost.__version__,
        "extractor": EXTRACTOR,
        "feature_len": int(width),
        "groups": [[h, len(c)] for h, _, c in kept],
        "untrained": int(min(total, max(0, inst.data_size - inst.last_train_size))),
    }
    arrays = {
        "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
        "features": np.concatenate(feats).astype("float32") if feats else np.zeros((0, 0), "float32"),
        "blocks": np.array([len(f) for f in feats], dtype=np.int32),
        "costs": np.concatenate([c for _, _, c in kept]).astype("float32") if kept else np.zeros(0, "float32"),
    }
    if inst.booster is not None:
        arrays["booster"] = np.frombuffer(bytes(inst.booster.save_raw(raw_format="ubj")), dtype=np.uint8)
    out = io.BytesIO()
    np.savez_compressed(out, **arrays)
    return out.getvalue(), meta


def decode(blob: bytes, inst) -> dict:
    """Loads a blob into `inst` (an XGBModel), all or nothing; returns its
    meta. Raises Unusable (or the reader's error) when it cannot be used."""
    import numpy as np

    if len(blob) > MAX_BLOB_BYTES:
        raise Unusable(f"{len(blob)} bytes, more than {MAX_BLOB_BYTES}")
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        unpacked = sum(i.file_size for i in z.infolist())
    if unpacked > MAX_UNPACKED_BYTES:
        raise Unusable(f"it unpacks to {unpacked} bytes, more than {MAX_UNPACKED_BYTES}")
    with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
        meta = json.loads(bytes(npz["meta"]).decode("utf-8"))
        _check_meta(meta)
        groups = _groups(meta, npz["features"], npz["blocks"], npz["costs"])
        booster = _booster(npz["booster"]) if "booster" in npz.files else None
    inst.data = groups
    inst.data_size = sum(len(g.costs) for g in groups.values())
    inst.booster = booster
    inst.last_train_size = inst.data_size - min(int(meta.get("untrained", 0)), inst.data_size)
    if booster is None:
        inst.last_train_size = 0
    return meta


def _check_meta(meta) -> None:
    import tvm

    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise Unusable(f"format {meta.get('format') if isinstance(meta, dict) else meta!r}, "
                       f"this driver reads {FORMAT}")
    if meta.get("extractor") != EXTRACTOR:
        raise Unusable(f"features by {meta.get('extractor')!r}, this driver's are {EXTRACTOR!r}")
    theirs, ours = str(meta.get("tvm_version", "")), tvm.__version__
    if theirs.split(".")[:2] != ours.split(".")[:2]:
        raise Unusable(f"made with TVM {theirs}, this worker has TVM {ours} (features may differ)")


def _groups(meta: dict, features, blocks, costs) -> OrderedDict:
    import numpy as np
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup

    sizes = [int(n) for _, n in meta["groups"]]
    width = int(meta["feature_len"])
    if any(n < 1 for n in sizes):
        raise Unusable("a workload group has no samples")
    if features.dtype != np.float32 or features.ndim != 2 or (len(features) and features.shape[1] != width):
        raise Unusable(f"features of shape {features.shape} ({features.dtype}), not [blocks, {width}] float32")
    if len(blocks) != sum(sizes) or len(costs) != sum(sizes) or int(blocks.sum()) != len(features):
        raise Unusable("its sample counts do not add up")
    if len(blocks) and (blocks.min() < 1 or not np.all(np.isfinite(costs)) or costs.min() <= 0):
        raise Unusable("a sample has no features or a cost that is not positive")
    per_sample = np.split(features, np.cumsum(blocks)[:-1]) if len(blocks) else []
    groups, start = OrderedDict(), 0
    for (group_hash, _), n in zip(meta["groups"], sizes):
        groups[str(group_hash)] = FeatureGroup(group_hash=str(group_hash), features=list(per_sample[start:start + n]),
                                               costs=costs[start:start + n].astype("float32"))
        start += n
    return groups


def _booster(raw):
    import xgboost as xgb

    booster = xgb.Booster()
    booster.load_model(bytearray(raw.tobytes()))
    return booster
