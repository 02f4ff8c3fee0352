"""Cores for the timing side: each device slot (and the candidates it starts) gets its own, and the
runner's builds and warm-ups keep the rest (launch-bound baselines moved by up to 19% between runs on
a host busy with builds)."""

from __future__ import annotations

import asyncio
import os

import pytest

from kernelbench_harness.executors.local import LocalExecutor, default_timing_cpus, plan_timing_cpus


def test_plan_takes_cores_from_the_top_and_keeps_the_rest():
    assert plan_timing_cpus(2, 2, list(range(32))) == ([[30, 31], [28, 29]], list(range(28)))
    assert plan_timing_cpus(1, 2, [5, 1, 3, 7, 2]) == ([[5, 7]], [1, 2, 3])


def test_plan_reserves_whole_cores_so_builds_never_share_one_with_timing():
    # Linux's usual numbering: CPUs 0-3 are cores 0-3, CPUs 4-7 their hyperthread siblings
    cores = {c: (0, c % 4) for c in range(8)}
    slots, rest = plan_timing_cpus(1, 2, list(range(8)), cores=cores)
    assert slots == [[3, 7]] and rest == [0, 1, 2, 4, 5, 6]
    slots, rest = plan_timing_cpus(2, 2, list(range(8)), cores=cores)
    assert slots == [[3, 7], [2, 6]] and rest == [0, 1, 4, 5]
    assert not {c % 4 for s in slots for c in s} & {c % 4 for c in rest}


def test_plan_declines_when_too_little_would_be_left():
    assert plan_timing_cpus(1, 0, list(range(16))) is None
    assert plan_timing_cpus(2, 2, list(range(5))) is None  # one core left for builds: not worth it
    assert plan_timing_cpus(1, 1, [0, 1]) is None
    assert plan_timing_cpus(1, 1, [0, 1], min_rest=1) == ([[1]], [0])  # asked for explicitly


def test_default_pins_gpu_slots_only_on_roomy_hosts():
    assert default_timing_cpus(["cuda:0"], 16) == 2
    assert default_timing_cpus(["cuda:0", "cuda:1"], 32) == 2
    assert default_timing_cpus(["cuda:0", "cuda:1"], 8) == 0
    assert default_timing_cpus(["cpu"], 64) == 0  # CPU timing: the slots are the CPU; leave it alone


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and at least 2 cores")
def test_slot_runs_on_its_cores_and_the_runner_keeps_the_rest(tmp_path):
    before = set(os.sched_getaffinity(0))
    cores = sorted(before)
    ex = LocalExecutor(["cpu"], {"scratch_dir": str(tmp_path), "timing_cpus": 1})
    try:
        assert ex._slots[0].fingerprint["slot_cpus"] == [cores[-1]]
        assert os.sched_getaffinity(0) == set(cores[:-1])  # builds and warm-ups started now inherit this
    finally:
        asyncio.run(ex.close())
    assert os.sched_getaffinity(0) == before


def test_slot_is_not_pinned_when_the_host_is_too_small(tmp_path):
    before = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    ex = LocalExecutor(["cpu"], {"scratch_dir": str(tmp_path), "timing_cpus": 64})
    try:
        if before is not None:
            assert set(ex._slots[0].fingerprint["slot_cpus"]) == before
            assert set(os.sched_getaffinity(0)) == before
    finally:
        asyncio.run(ex.close())
