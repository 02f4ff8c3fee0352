"""Executors behind one interface: several slots on one device give the results of one slot and never
time together; the Ray executor on a local Ray instance (CPU) gives the same verdicts."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest
from early import Early, in_child

from kernelbench_harness.runner import RunConfig, execute_run
from kernelbench_harness.store import Store

from .conftest import SHORT_TIMING


def _outcomes(db: str, run: str) -> dict[tuple[int, int, int], str]:
    st = Store(db)
    try:
        return {(a.level, a.problem_id, a.sample_id): str(a.result.outcome) for a in st.attempts(run)}
    finally:
        st.close()


def _run(tmp_path, name: str, **kw):
    db = f"sqlite:///{tmp_path / 'kb.db'}"
    # short timing: slots, verdicts and who measured what are under test, not the times
    cfg = RunConfig(model="bundled", levels=(1,), ids="1-2", run_name=name, db=db, timeout_s=120,
                    build_cache=str(tmp_path / "cache"), protocol_overrides=SHORT_TIMING, **kw)
    s = asyncio.run(execute_run(cfg))
    return db, s


# The runs of the tests below are made in child interpreters, beside the tests before them (tests/early.py);
# the tests read what they returned and stored.


def _one_and_two_slots(tmp_path: Path):
    db, one = _run(tmp_path, "one", gpus="cpu")
    _, two = _run(tmp_path, "two", gpus="cpu", slots_per_gpu=2, quiet_host=True)  # as --gpus cpu,cpu
    return db, one, two


def _via_ray(tmp_path: Path):
    return _run(tmp_path, "ray", executor="ray")


def _replayed_pair(tmp_path: Path) -> str:
    import json

    import kernelbench_harness

    root = Path(kernelbench_harness.__file__).resolve().parents[1]
    code = (root / "problems" / "solutions" / "level1" / "2_Row_Softmax.triton.py").read_text()
    gens = tmp_path / "gens.jsonl"
    gens.write_text("".join(json.dumps({"level": 1, "problem_id": 2, "model": "m", "sample_id": i, "code": code})
                            + "\n" for i in range(2)))
    db = f"sqlite:///{tmp_path / 'kb.db'}"
    cfg = RunConfig(model=f"replay:{gens}", levels=(1,), ids="2", run_name="pair", db=db, timeout_s=120,
                    build_cache=str(tmp_path / "cache"), gpus="cpu,cpu", protocol_overrides=SHORT_TIMING)
    asyncio.run(execute_run(cfg))
    return db


EARLY = {"one_and_two_slots": Early(in_child(_one_and_two_slots)), "via_ray": Early(in_child(_via_ray)),
         "replayed_pair": Early(in_child(_replayed_pair))}


@pytest.fixture
def one_and_two_slots():
    return EARLY["one_and_two_slots"].result()


@pytest.fixture
def via_ray():
    return EARLY["via_ray"].result()


@pytest.fixture
def replayed_pair() -> str:
    return EARLY["replayed_pair"].result()


def test_two_slots_on_one_device_match_one_slot_and_take_turns_to_time(one_and_two_slots):
    db, one, two = one_and_two_slots
    assert one.outcomes == two.outcomes == {"correct": 2}
    assert _outcomes(db, "one") == _outcomes(db, "two")
    st = Store(db)
    try:
        windows = []
        for a in st.attempts("two"):
            windows += a.result.extra.get("timing_windows", [])
            for info in (a.result.extra.get("baseline_info") or {}).values():
                if info and info.get("window"):
                    windows.append(info["window"])
    finally:
        st.close()
    assert len({w["pid"] for w in windows}) == 2, "both slots should have timed something"
    # the run's builds and warm-ups paused in every window (--quiet-host)
    assert all("quiet_pids" in w for w in windows), windows
    windows.sort(key=lambda w: w["start"])
    for a, b in zip(windows, windows[1:]):
        assert a["end"] <= b["start"], f"timings overlapped on {a['device']}: {a} {b}"


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed")
def test_ray_executor_on_a_local_cpu_instance(via_ray):
    db, viaray = via_ray
    # the bundled solutions are correct: the same verdicts the local executor gives (test above)
    assert viaray.outcomes == {"correct": 2}
    assert set(_outcomes(db, "ray").values()) == {"correct"}
    st = Store(db)
    try:
        assert st.get_run("ray").hardware["slots"][0]["device"].startswith("ray:")
    finally:
        st.close()


def test_candidates_of_one_problem_on_two_slots_share_one_baseline_measurement(replayed_pair):
    # two samples of L1/2 (no build step) start together on two slots; one of them measures the
    # baselines, the other waits and reuses them (the H200 replay measured L1/6's eager time twice,
    # 3.7% apart, when two of its candidates ran at once)
    db = replayed_pair
    st = Store(db)
    try:
        atts = st.attempts("pair")
    finally:
        st.close()
    assert len(atts) == 2 and all(str(a.result.outcome) == "correct" for a in atts)
    measured = [a for a in atts if a.result.extra.get("baselines")]
    assert len(measured) == 1, "the baselines were measured more than once"
    assert atts[0].result.eager_ms == atts[1].result.eager_ms
    assert atts[0].result.compile_ms == atts[1].result.compile_ms
    # every timing window says how busy the host was meanwhile
    windows = [w for a in atts for w in a.result.extra.get("timing_windows", [])]
    assert windows and all(0.0 <= w["host_cpu_busy"] <= 1.0 for w in windows if "host_cpu_busy" in w)
    assert any("host_cpu_busy" in w for w in windows)


def test_the_gpu_count_is_asked_once_per_visible_devices_value(monkeypatch):
    """A run resolves its devices twice before its slots start; each ask starts a Python that imports torch
    (seconds on the H200 host, where a GPU run took 11-13 s to reach its executor in session 10)."""
    from kernelbench_harness.executors import local

    asked: list[str | None] = []
    local._gpu_count_for.cache_clear()
    try:
        monkeypatch.setattr(local, "_ask_gpu_count", lambda: asked.append(local.os.environ.get("CUDA_VISIBLE_DEVICES")) or 2)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
        assert local.resolve_devices(None) == ["cuda:0", "cuda:1"]
        assert local.resolve_devices("1") == ["cuda:1"]
        assert asked == ["0,1"]
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,4")
        local.resolve_devices(None)
        assert asked == ["0,1", "3,4"]
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
        assert local.resolve_devices(None) == ["cpu"] and len(asked) == 2  # none visible: nothing asked
    finally:
        local._gpu_count_for.cache_clear()  # the stand-in counts must not outlive the test


def test_resolve_devices_checks_the_same_gpus_syntax_as_the_cli():
    """One parser (executors.parse_gpus) serves the CLI and the library call: resolve_devices took '0,,1' as slots 0
    and 1, and ',' as no slot at all."""
    from kernelbench_harness.errors import ConfigError
    from kernelbench_harness.executors import local

    for bad in ("0,,1", ",", "a", "-1", "cpu,0"):
        with pytest.raises(ConfigError, match="bad --gpus value"):
            local.resolve_devices(bad)
    assert local.resolve_devices("cpu, CPU") == ["cpu", "cpu"]


@pytest.mark.parametrize("empty", ["", " "])
def test_resolve_devices_refuses_an_empty_spec_and_names_the_accepted_forms(empty):
    """resolve_devices("") read as "auto" (every visible GPU) where the CLI refuses --gpus ""; None is still every
    visible GPU, else the CPU (the CLI's default)."""
    from kernelbench_harness.errors import ConfigError
    from kernelbench_harness.executors import local

    with pytest.raises(ConfigError, match=f"bad --gpus value {empty!r}: empty") as ei:
        local.resolve_devices(empty)
    assert "--gpus 0,1" in ei.value.fix and "--gpus cpu" in ei.value.fix and "leave --gpus out" in ei.value.fix
    assert local.resolve_devices(None) == local.resolve_devices("auto")


def test_the_ray_executor_checks_gpus_as_the_cli_does_before_ray_starts(monkeypatch):
    """RayExecutor parsed --gpus on its own: "" was every GPU of the cluster, "0,,1" two slots, and "auto" one GPU
    slot (so a one-CPU-node cluster refused it: "1 GPU slots requested"). It now uses parse_gpus, before Ray starts,
    and "auto" is every GPU of the cluster, as None is."""
    from kernelbench_harness.errors import ConfigError
    from kernelbench_harness.executors import ray as ray_executor

    class FakeRay:
        """Enough of ray for the constructor: a cluster of 2 GPUs whose actors answer fingerprint()."""

        inits = 0

        def is_initialized(self):
            return True

        def init(self, **kw):
            FakeRay.inits += 1

        def cluster_resources(self):
            return {"GPU": 2, "CPU": 8}

        def remote(self, cls):
            class Handle:
                def options(self, **kw):
                    return self

                def remote(self, device, opts):
                    h = type("A", (), {})()
                    h.device = device
                    h.fingerprint = type("F", (), {"remote": staticmethod(lambda: {"ray_node": "n0"})})()
                    return h
            return Handle()

        def get(self, refs, timeout=None):
            return list(refs)

    import sys

    monkeypatch.setitem(sys.modules, "ray", FakeRay())
    for bad in ("", ",", "0,,1", "-1"):
        with pytest.raises(ConfigError, match="bad --gpus value"):
            ray_executor.RayExecutor(gpus=bad)
    assert len(ray_executor.RayExecutor(gpus="auto").slots) == 2
    assert len(ray_executor.RayExecutor(gpus=None).slots) == 2
    assert [s["device"] for s in ray_executor.RayExecutor(gpus="cpu,cpu").slots] == ["ray:n0:cpu"] * 2


def test_the_gpu_count_comes_from_nvml_without_a_child_and_falls_back_to_one(monkeypatch):
    """NVML's count needs no child process (whose fresh ``import torch`` took about 4.5 s of an H200 run's
    start-up in session 24); when NVML cannot answer (-1, or the helper fails) a child asks CUDA."""
    import subprocess
    import warnings

    import torch

    from kernelbench_harness.executors import local

    children: list[list[str]] = []

    class _Done:
        stdout = "5\n"

    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: children.append(argv) or _Done())
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: 3, raising=False)
    assert local._ask_gpu_count() == 3 and children == []
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: 0, raising=False)
    assert local._ask_gpu_count() == 0 and children == []  # NVML sees none: no child either
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: -1, raising=False)
    assert local._ask_gpu_count() == 5 and len(children) == 1

    def broken() -> int:
        raise RuntimeError("moved")

    monkeypatch.setattr(torch.cuda, "_device_count_nvml", broken, raising=False)
    assert local._ask_gpu_count() == 5 and len(children) == 2

    def warns() -> int:
        import warnings

        warnings.warn("Can't initialize NVML")
        return 2

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        monkeypatch.setattr(torch.cuda, "_device_count_nvml", warns, raising=False)
        assert local._ask_gpu_count() == 2 and seen == []  # NVML's warning kept off the terminal

    import threading

    release = threading.Event()
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: release.wait(30) and 4, raising=False)
    try:
        assert local._nvml_gpu_count(torch, timeout_s=0.2) == -1  # a wedged NVML: the child is asked instead
    finally:
        release.set()


def test_a_driver_that_does_not_answer_the_gpu_count_is_an_error_naming_the_fix(monkeypatch, tmp_path):
    """NVML cannot answer and the child that asks CUDA hangs (a wedged driver): after its time limit the run stops
    with an error saying what to check and how to run on the CPU, instead of waiting without a word and then going
    on as if the machine had no GPU. Here the child is a real process that sleeps past a short limit (named through
    the module's command, not by patching sys.executable: the session's background jobs start children with it)."""
    import time

    import torch

    from kernelbench_harness.errors import PrerequisiteError
    from kernelbench_harness.executors import local

    hang = tmp_path / "python"
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: -1, raising=False)
    monkeypatch.setattr(local, "_gpu_count_child_argv", lambda: [str(hang)])
    monkeypatch.setattr(local, "GPU_COUNT_CHILD_TIMEOUT_S", 0.5)
    t0 = time.monotonic()
    with pytest.raises(PrerequisiteError, match="not responding") as err:
        local._ask_gpu_count()
    assert time.monotonic() - t0 < 10
    assert "nvidia-smi" in err.value.fix and "--gpus cpu" in err.value.fix


def test_a_worker_stopped_by_sigint_is_started_again_at_its_next_call(tmp_path):
    """Ctrl-C ends the device workers quietly (exit code 130) and none is restarted while the run stops; a
    worker that got SIGINT on its own (a candidate without Landlock's signal scoping could send it) is
    started again at its next call instead of failing every later job."""
    import os
    import signal
    import time

    from kernelbench_harness.executors.local import INTERRUPTED_EXIT, _Slot

    slot = _Slot(0, "cpu", {"sandbox": False, "scratch_dir": str(tmp_path)}, None)
    try:
        slot.wait_ready()
        first = slot.proc.pid
        os.kill(first, signal.SIGINT)
        slot.proc.join(30)
        assert slot.proc.exitcode == INTERRUPTED_EXIT
        tag, why = slot.call(("noop",))
        assert tag == "died" and "SIGINT" in why
        t0 = time.monotonic()
        tag, why = slot.call(("noop",))  # started again first
        assert tag == "error" and "unknown request" in why and slot.proc.pid != first
        assert time.monotonic() - t0 < 120
    finally:
        slot.stop()


def test_quiet_host_is_on_by_default_only_where_every_slot_is_on_one_gpu(caplog):
    from kernelbench_harness.executors.local import quiet_host_for

    assert quiet_host_for(None, ["cuda:0"]) is True
    assert quiet_host_for(None, ["cuda:0"] * 6) is True  # six slots on one GPU
    assert quiet_host_for(None, ["cuda:0", "cuda:1"]) is False  # windows on two GPUs overlap
    assert quiet_host_for(None, ["cpu", "cpu"]) is False  # no GPU: nothing is timed on a device
    assert quiet_host_for(False, ["cuda:0"]) is False  # --no-quiet-host
    assert quiet_host_for(True, ["cpu", "cpu"]) is True  # asked for: honoured on one device
    with caplog.at_level("WARNING"):
        assert quiet_host_for(True, ["cuda:0", "cuda:1"]) is False
    assert "only where every slot is on one device" in caplog.text
