"""Executors behind one interface: several slots on one device give the results of one slot and never
time together; the Ray executor on a local Ray instance (CPU) gives the same verdicts."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from kernelbench_harness.runner import RunConfig, execute_run
from kernelbench_harness.store import Store


def _outcomes(db: str, run: str) -> dict[tuple[int, int, int], str]:
    st = Store(db)
    try:
        return {(a.level, a.problem_id, a.sample_id): str(a.result.outcome) for a in st.attempts(run)}
    finally:
        st.close()


def _run(tmp_path, name: str, **kw):
    db = f"sqlite:///{tmp_path / 'kb.db'}"
    cfg = RunConfig(model="bundled", levels=(1,), ids="1-2", run_name=name, db=db, timeout_s=120,
                    build_cache=str(tmp_path / "cache"), **kw)
    s = asyncio.run(execute_run(cfg))
    return db, s


def test_two_slots_on_one_device_match_one_slot_and_take_turns_to_time(tmp_path):
    db, one = _run(tmp_path, "one", gpus="cpu")
    _, two = _run(tmp_path, "two", gpus="cpu,cpu")
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
    windows.sort(key=lambda w: w["start"])
    for a, b in zip(windows, windows[1:]):
        assert a["end"] <= b["start"], f"timings overlapped on {a['device']}: {a} {b}"


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed")
def test_ray_executor_on_a_local_cpu_instance(tmp_path):
    db, viaray = _run(tmp_path, "ray", executor="ray")
    # the bundled solutions are correct: the same verdicts the local executor gives (test above)
    assert viaray.outcomes == {"correct": 2}
    assert set(_outcomes(db, "ray").values()) == {"correct"}
    st = Store(db)
    try:
        assert st.get_run("ray").hardware["slots"][0]["device"].startswith("ray:")
    finally:
        st.close()
