"""The baseline cache: a stored eager / torch.compile time is reused only on an exact match of
(problem source, hardware, software, protocol timing settings, precision, mode), and a second run on
the same problems measures no baseline at all.

The cache is :class:`kernelbench_harness.runner._Baselines` over a real store (an SQLite file).
The last test runs :func:`execute_run` twice on the CPU with a scripted model and checks the second
run's results carry no freshly measured baselines while using the first run's times.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from early import Early, in_child

from kernelbench_harness.adapters.scripted import ScriptedAdapter
from kernelbench_harness.core import Problem, TimingStats
from kernelbench_harness.problems import ProblemSet
from kernelbench_harness.protocols import Protocol, get_protocol
from kernelbench_harness.runner import RunConfig, _Baselines, baseline_modes, execute_run
from kernelbench_harness.store import Store

PROBLEM = Problem(1, 1, "Affine", '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return x * self.alpha + 0.25


def get_inputs():
    return [torch.rand(16, 64)]


def get_init_inputs():
    return [1.5]
''', "tests/test_baseline_cache.py")

FP = {"hardware_fingerprint": "hw-A", "software_fingerprint": "sw-A", "device_name": "test device"}


def stats(ms: float) -> TimingStats:
    return TimingStats(ms, ms, 0.0, ms, ms, ms, ms, 3, (ms, ms, ms), "wall", "median")


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'kb.db'}")
    yield s
    s.close()


def test_hit_after_put(store: Store) -> None:
    b = _Baselines(store, FP, get_protocol("kbench"))
    modes = baseline_modes(get_protocol("kbench"))
    assert b.known(PROBLEM, modes) == {}
    b.put(PROBLEM, {"eager": stats(1.5), "compile:default": stats(0.75)})
    got = b.known(PROBLEM, modes)
    assert set(got) == {"eager", "compile:default"}
    assert got["eager"].value_ms == 1.5 and got["compile:default"].value_ms == 0.75
    assert got["eager"].samples_ms == (1.5, 1.5, 1.5)
    b.put(PROBLEM, {"eager": stats(9.0)})  # an existing key is not overwritten
    assert b.known(PROBLEM, ["eager"])["eager"].value_ms == 1.5


CHANGES: dict[str, tuple[dict[str, Any], Protocol, Problem]] = {
    "hardware": ({**FP, "hardware_fingerprint": "hw-B"}, get_protocol("kbench"), PROBLEM),
    "software": ({**FP, "software_fingerprint": "sw-B"}, get_protocol("kbench"), PROBLEM),
    "protocol timing (warm-ups)": (FP, get_protocol("kbench", warmup=9), PROBLEM),
    "protocol timing (L2 flush)": (FP, get_protocol("kbench", l2_flush="none"), PROBLEM),
    "protocol timing (statistic)": (FP, get_protocol("kbench", statistic="mean"), PROBLEM),
    "protocol timing (TF32)": (FP, get_protocol("kbench", tf32=True), PROBLEM),
    "other protocol": (FP, get_protocol("kernelbench"), PROBLEM),
    "precision": (FP, get_protocol("kbench", "fp16"), PROBLEM),
    "problem source": (FP, get_protocol("kbench"), dataclasses.replace(
        PROBLEM, code=PROBLEM.code.replace("0.25", "0.5"), code_sha256="")),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_miss_on_any_change_of_the_key(store: Store, change: str) -> None:
    _Baselines(store, FP, get_protocol("kbench")).put(PROBLEM, {"eager": stats(1.0), "compile:default": stats(2.0)})
    fp, proto, problem = CHANGES[change]
    assert _Baselines(store, fp, proto).known(problem, ["eager", "compile:default"]) == {}


def test_miss_on_another_compile_mode_and_hit_when_only_the_judge_changes(store: Store) -> None:
    _Baselines(store, FP, get_protocol("kbench")).put(PROBLEM, {"eager": stats(1.0), "compile:default": stats(2.0)})
    assert _Baselines(store, FP, get_protocol("kbench")).known(PROBLEM, ["compile:max-autotune"]) == {}
    # correctness settings do not change a baseline's time: the key ignores them
    judge_only = get_protocol("kbench", fp64_multiple=4.0, correct_trials=9)
    assert set(_Baselines(store, FP, judge_only).known(PROBLEM, ["eager", "compile:default"])) == {
        "eager", "compile:default"}


# each protocol's baseline key (its timing fingerprint) before min_custom_kernel_share was added (main at
# bdd159e): a setting that changes no time must leave the baselines stored before it usable
_KEYS_BEFORE_KERNEL_SHARE = {
    ("kbench", "fp32"): "80f24c8a3cf00c22", ("kbench", "fp16"): "a6cc361259a89814",
    ("kbench", "bf16"): "19d5f27700d0e3c6", ("kernelbench", "fp32"): "f313e7c8225153ca",
    ("kernelbench", "fp16"): "500d05377897571d", ("kernelbench", "bf16"): "5d1c074819303ba6",
    ("cuda-agent", "fp32"): "e054de01837ffd9d", ("cuda-agent", "fp16"): "25cec0b102095092",
    ("cuda-agent", "bf16"): "f9481655d80d365e",
}


@pytest.mark.parametrize("name, precision", list(_KEYS_BEFORE_KERNEL_SHARE))
def test_the_kernel_share_setting_leaves_every_baseline_key_unchanged(store: Store, name: str, precision: str) -> None:
    want = _KEYS_BEFORE_KERNEL_SHARE[(name, precision)]
    for share in (None, 0.0, 0.01, 0.5):
        proto = get_protocol(name, precision, **({} if share is None else {"min_custom_kernel_share": share}))
        assert _Baselines(store, FP, proto).key(PROBLEM, "eager")["protocol_fingerprint"] == want


def _import_under_the_same_key(store: Store, b: _Baselines) -> None:
    k = b.key(PROBLEM, "eager")
    store.put_baseline(problem=PROBLEM, hardware_fingerprint=k["hardware_fingerprint"],
                       software_fingerprint=k["software_fingerprint"], protocol_fingerprint=k["protocol_fingerprint"],
                       precision=k["precision"], mode="eager", stats=stats(0.01), hardware={"gpu_name": "H100"},
                       measured_here=False, source="imported:H100")


def test_an_imported_baseline_is_never_used_as_a_measured_one(store: Store) -> None:
    b = _Baselines(store, FP, get_protocol("kbench"))
    _import_under_the_same_key(store, b)
    assert b.known(PROBLEM, ["eager"]) == {}


def test_a_measured_baseline_is_stored_beside_an_imported_one(store: Store) -> None:
    b = _Baselines(store, FP, get_protocol("kbench"))
    _import_under_the_same_key(store, b)
    b.put(PROBLEM, {"eager": stats(1.0)})
    assert b.known(PROBLEM, ["eager"])["eager"].value_ms == 1.0


_CANDIDATE = '''Here is the kernel.

```python
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _affine(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * alpha + 0.25, mask=m)


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _affine[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), self.alpha, BLOCK=256)
        return y
```
'''


def _two_runs(tmp_path: Path) -> tuple[str, dict[str, int]]:
    """Both runs of the test below, into one store (in a child interpreter, beside the tests before it:
    tests/early.py); returns the store's URL and how many candidates each run evaluated."""
    db = f"sqlite:///{tmp_path / 'kb.db'}"
    ps = ProblemSet(problems=(PROBLEM,), issues=(), source="tests")
    # short timing: the cache, not the times, is under test
    fast = {"warmup": 1, "trials": 3, "max_trials": 3, "adaptive": False, "correct_trials": 2}
    evaluated = {}
    for name in ("first", "second"):
        cfg = RunConfig(model="scripted", run_name=name, db=db, gpus="cpu", protocol_overrides=fast, seed=5,
                        build_cache=str(tmp_path / "cache"), timeout_s=120)
        summary = asyncio.run(execute_run(cfg, problem_set=ps, adapter=ScriptedAdapter([_CANDIDATE])))
        evaluated[name] = summary.evaluated
    return db, evaluated


# queued when the session is collected (tests/early.py)
EARLY = {"two_runs": Early(in_child(_two_runs))}


@pytest.fixture
def two_runs() -> tuple[str, dict[str, int]]:
    return EARLY["two_runs"].result()


def test_a_second_run_on_the_same_problems_measures_no_baseline(two_runs: tuple[str, dict[str, int]]) -> None:
    db, evaluated = two_runs
    runs = {}
    for name in ("first", "second"):
        assert evaluated[name] == 1
        with Store(db) as s:
            runs[name] = s.attempts(name)[0].result
    first, second = runs["first"], runs["second"]
    assert first.outcome.passed, (first.outcome, first.error[:300])
    assert set(first.extra["baselines"]) == {"eager", "compile:default"}
    assert second.outcome.passed, (second.outcome, second.error[:300])
    assert second.extra["baselines"] == {}
    assert second.eager_ms == first.eager_ms and second.compile_ms == first.compile_ms
    with Store(db) as s:
        assert len(s.baselines(problem_sha256=PROBLEM.code_sha256)) == 2


HOST_BOUND = {"launch_hidden_trials": 40, "launch_host_bound": 31, "launch_host_ms": 6.7}


def test_how_a_stored_baseline_was_measured_goes_with_it(store: Store) -> None:
    """A cached baseline's timing info reaches the job (EvalJob.baseline_info), so one whose time the host set
    marks the problem host-bound in a run that reuses it (H200 session 20: L3/22's eager time came from another
    machine, whose host issued the candidate's launches 2.4 times as fast)."""
    b = _Baselines(store, FP, get_protocol("kbench"))
    b.put(PROBLEM, {"eager": stats(1.0), "compile:default": stats(2.0)}, {"eager": HOST_BOUND, "compile:default": None})
    known = b.known(PROBLEM, ["eager", "compile:default", "compile:max-autotune"])
    assert b.info(PROBLEM, known) == {"eager": HOST_BOUND}
    # a newer record stored meanwhile (another process sharing the store): the info is still that of the
    # record whose times the job got
    k = b.key(PROBLEM, "eager")
    store.put_baseline(problem=PROBLEM, hardware_fingerprint=k["hardware_fingerprint"],
                       software_fingerprint=k["software_fingerprint"], protocol_fingerprint=k["protocol_fingerprint"],
                       precision=k["precision"], mode="eager", stats=stats(5.0), hardware={"measurement": {}},
                       measured_here=True, source="measured")
    assert b.info(PROBLEM, known) == {"eager": HOST_BOUND}
    assert b.info(PROBLEM, b.known(PROBLEM, ["eager"])) == {"eager": {}}


@pytest.mark.parametrize("cached_info", [HOST_BOUND, None])
def test_a_cached_host_bound_baseline_flags_the_problem(tmp_path: Path, cached_info: dict | None) -> None:
    from execution.evalkit import AFFINE, STAND_IN_BASELINES, describe
    from execution.test_reference_budget import CORRECT

    from kernelbench_harness.core import Backend, Candidate, Outcome
    from kernelbench_harness.execution.device import DeviceEvaluator, EvalJob

    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "ev", sandbox=False)
    try:
        job = EvalJob(AFFINE, Candidate(AFFINE.level, AFFINE.problem_id, CORRECT, Backend.detect(CORRECT)),
                      get_protocol("kbench", warmup=1, trials=3, adaptive=False, correct_trials=2),
                      run_seed=7, baselines=dict(STAND_IN_BASELINES),
                      baseline_info={"eager": cached_info} if cached_info else {}, timeout_s=20.0)
        res = ev.evaluate(job)
        assert res.outcome is Outcome.CORRECT, describe(res)
        if cached_info:
            assert "eager" in res.extra["host_bound"] and "host-bound" in res.extra["problem_flags"]
        else:
            assert "eager" not in (res.extra.get("host_bound") or [])
    finally:
        ev.close()
