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

from .conftest import SHORT_TIMING, TWICE_SOURCE

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


# one extension without torch's headers (what is under test is the one compile, not the headers)
_SAME_EXTENSION = f'''import torch
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="twice", cpp_sources={TWICE_SOURCE!r}, no_implicit_headers=True)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return _ext.twice(x)

# candidate {{k}}: the Python differs, the extension is the same
'''


def _two_at_once(tmp_path: Path) -> dict:
    """Two candidates with one extension, built by a two-process pool at the same time (in a child
    interpreter, beside the tests before it: tests/early.py)."""
    from kernelbench_harness.core import Backend, Candidate
    from kernelbench_harness.execution.builder import BuildPool

    pool = BuildPool(tmp_path / "cache", workers=2, timeout_s=600, scratch_dir=tmp_path / "s")

    async def both():
        return await asyncio.gather(*(pool.build(Candidate(1, k, _SAME_EXTENSION.replace("{k}", str(k)), Backend.CPP))
                                      for k in (1, 2)))

    try:
        outs = asyncio.run(both())
        return {"outs": [(o.status, o.error[:2000], o.extensions) for o in outs], "stats": dict(pool.stats),
                "entries": sorted(p.name for p in (tmp_path / "cache").glob("kb_*"))}
    finally:
        pool.close()


EARLY["two_at_once"] = Early(in_child(_two_at_once))


def test_one_extension_in_two_candidates_built_at_once_is_compiled_once():
    """Issue 7: an identical kernel is never compiled twice. The pool keyed its in-flight builds by the whole
    candidate source, so two candidates with the same extension, built at the same time, both compiled it
    (the H200 sweep with one CUDA copy kernel in 148 candidates: 15 compiles of the one source, 937 s)."""
    got = EARLY["two_at_once"].result()
    statuses = sorted(s for s, _, _ in got["outs"])
    assert statuses == ["built", "cached"], got["outs"]
    assert got["stats"]["built"] == 1 and got["stats"]["cached"] == 1, got["stats"]
    assert len(got["entries"]) == 1
    # both name the one binary: the second loaded the first one's
    assert {x for _, _, exts in got["outs"] for x in exts} == set(got["entries"])


def test_a_claimed_extension_makes_the_next_claimant_wait_and_load_it(tmp_path):
    """The claim protocol itself (BuildPool._serve_claim): the second claimant waits while the first compiles,
    then is told the cache has it; a bad name, or a wait past the job's deadline, compiles without a claim."""
    import threading
    import time

    from kernelbench_harness.execution.builder import BuildPool

    pool = BuildPool(tmp_path / "cache", workers=2, scratch_dir=tmp_path / "s")
    try:
        name = "kb_" + "0123456789abcdef01234567"
        first: set[str] = set()
        assert pool._serve_claim(name, first, time.monotonic() + 60) == "ext_go" and first == {name}
        answers: list[str] = []
        second: set[str] = set()
        waiter = threading.Thread(target=lambda: answers.append(pool._serve_claim(name, second,
                                                                                   time.monotonic() + 60)))
        waiter.start()
        time.sleep(0.3)
        assert answers == []  # still waiting for the first process's compile
        job = tmp_path / "job"
        (job / "b").mkdir(parents=True)
        (job / "b" / f"{name}.so").write_bytes(b"binary")
        pool._store_binary(name, job / "b" / f"{name}.so", job)
        pool._release_claims(first)
        waiter.join(10)
        assert answers == ["ext_cached"] and second == set() and pool.stats["shared"] == 1
        assert (tmp_path / "cache" / name / f"{name}.so").read_bytes() == b"binary"
        # a binary from outside the job's own folder is never stored
        other = "kb_" + "f" * 24
        (tmp_path / "elsewhere.so").write_bytes(b"x")
        pool._store_binary(other, tmp_path / "elsewhere.so", job)
        assert not (tmp_path / "cache" / other).exists()
        # a name that is no cache entry's: compile, nothing held
        held: set[str] = set()
        assert pool._serve_claim("../kb_x", held, time.monotonic() + 60) == "ext_go" and held == set()
        # the wait ends at the job's deadline: compile then, without taking the other's claim
        assert pool._serve_claim(other, first, time.monotonic() + 60) == "ext_go" and first == {other}
        t0 = time.monotonic()
        assert pool._serve_claim(other, held, time.monotonic() + 0.3) == "ext_go" and held == set()
        assert 0.25 <= time.monotonic() - t0 < 5
        # a new claim drops the process's unfinished one (a forged message cannot hold many)
        assert pool._serve_claim(name.replace("0", "1"), first, time.monotonic() + 60) == "ext_go"
        assert first == {name.replace("0", "1")} and other not in pool._ext_busy
    finally:
        pool.close()
