"""The build pool and the device slots share one extension cache: a candidate's extension is compiled
once, by the pool, and the evaluation loads it without compiling; a second run compiles nothing."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from early import Early, in_child

from kernelbench_harness.core import Outcome
from kernelbench_harness.runner import RunConfig, execute_run
from kernelbench_harness.store import Store

from .conftest import SHORT_TIMING

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="needs a C++ compiler")


def _run(tmp_path, name: str):
    cfg = RunConfig(model="bundled", model_options={"variant": "cpp"}, levels=(1,), ids="4",
                    run_name=name, db=f"sqlite:///{tmp_path / 'kb.db'}", gpus="cpu",
                    build_cache=str(tmp_path / "cache"), build_workers=1, timeout_s=120,
                    protocol_overrides=SHORT_TIMING)  # the cache is under test, not the times
    return asyncio.run(execute_run(cfg))


def _first_and_second(tmp_path: Path):
    """Both runs of the test below, into one store and one cache (in a child interpreter, beside the tests
    before it: tests/early.py)."""
    return _run(tmp_path, "first"), _run(tmp_path, "second")


# queued when the session is collected (tests/early.py): the C++ build runs beside the tests before this one
EARLY = {"first_and_second": Early(in_child(_first_and_second))}


@pytest.fixture
def first_and_second():
    return EARLY["first_and_second"].result()


def test_extension_built_once_by_the_pool_and_loaded_from_the_cache(first_and_second):
    first, second = first_and_second
    tmp_path = EARLY["first_and_second"].folder
    assert first.outcomes == {"correct": 1}
    assert first.build_stats["built"] == 1
    st = Store(f"sqlite:///{tmp_path / 'kb.db'}")
    try:
        (att,) = st.attempts("first")
        build = att.result.extra["build"]
        assert att.result.outcome is Outcome.CORRECT
        # the evaluation found the pool's binary: nothing compiled inside the device slot
        assert build["built"] == [] and len(build["cache_hits"]) == 1
        # the trusted side's split of the evaluation is stored (issue 7: where the time goes)
        assert {"slot_start", "slot_build_construct", "slot_correctness", "slot_timing", "slot_finish"} \
            <= set(att.result.phase_s)
    finally:
        st.close()
    assert second.outcomes == {"correct": 1}
    assert second.build_stats["built"] == 0 and second.build_stats["cached"] == 1


def test_pool_and_slot_use_one_arch_list_whatever_the_ambient_environment(monkeypatch):
    """The cache key includes TORCH_CUDA_ARCH_LIST: an ambient value (GPU images set one) must not reach
    either side, or the slot misses every binary the pool built (seen on the H200)."""
    from kernelbench_harness.execution.build import target_arch_list

    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;8.6;9.0+PTX")
    monkeypatch.delenv("KBENCH_CUDA_ARCH_LIST", raising=False)
    assert target_arch_list((9, 0)) == "9.0" == target_arch_list("9.0")
    assert target_arch_list(None) is None
    monkeypatch.setenv("KBENCH_CUDA_ARCH_LIST", "9.0a")
    assert target_arch_list((9, 0)) == "9.0a"


def test_a_prebuilt_binary_replaced_during_the_run_is_caught_and_removed(tmp_path):
    """Without Landlock the cache is writable to candidates; a replaced binary must not count."""
    import os

    from kernelbench_harness.execution.builder import BuildPool

    pool = BuildPool(tmp_path / "cache", workers=1, scratch_dir=tmp_path / "s")
    try:
        entry = tmp_path / "cache" / "kb_abc123"
        entry.mkdir()
        (entry / "kb_abc123.so").write_bytes(b"honest")
        assert pool.changed_cache_entries(["kb_abc123"]) == []  # first seen now
        assert pool.changed_cache_entries(["kb_abc123"]) == []
        st = os.stat(entry / "kb_abc123.so")
        (entry / "kb_abc123.so").write_bytes(b"forged")  # same size
        os.utime(entry / "kb_abc123.so", ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back: ctime cannot be
        assert pool.changed_cache_entries(["kb_abc123"]) == ["kb_abc123"] and not entry.exists()
        assert pool.changed_cache_entries(["../x", 5, "kb_../../etc"]) == [] and pool.changed_cache_entries(None) == []
    finally:
        pool.close()
