"""The trusted side running out of device memory while judging a stored reference is tried once more
with the allocator's cache handed back, and then reported as the harness's failure (``oom`` on the
ReferenceError_, stored as ``harness_error``/``trusted_oom``), never as the candidate's ``oom``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from kernelbench_harness.execution.device import ProblemContext, ReferenceError_


def _ctx(device: str, fails: int) -> SimpleNamespace:
    calls = {"n": 0}

    def judge(outs, ref, ref64):
        calls["n"] += 1
        if calls["n"] <= fails:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")
        return "judged"
    ctx = SimpleNamespace(lazy_refs=False, refs=[["ref"]], refs64=None, device=torch.device(device),
                          _judge=judge, calls=calls)
    ctx._retry_on_oom = lambda first, second, what: ProblemContext._retry_on_oom(ctx, first, second, what)
    return ctx


def test_a_stored_reference_judge_out_of_memory_is_tried_again(monkeypatch):
    emptied: list[bool] = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    ctx = _ctx("cuda:0", fails=1)
    assert ProblemContext.compare(ctx, ["out"], 0) == "judged"
    assert emptied == [True] and ctx.calls["n"] == 2


def test_a_judge_that_runs_out_twice_is_the_harnesss_failure(monkeypatch):
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    with pytest.raises(ReferenceError_) as e:
        ProblemContext.compare(_ctx("cuda:0", fails=2), ["out"], 0)
    assert e.value.oom and "ran out of memory" in str(e.value)
    with pytest.raises(ReferenceError_) as e:  # on the CPU: no cache to hand back, reported at once
        ProblemContext.compare(_ctx("cpu", fails=1), ["out"], 0)
    assert e.value.oom


def test_staging_a_set_out_of_memory_is_the_harnesss_failure_not_the_candidates():
    from kernelbench_harness.execution.device import DeviceEvaluator

    def fill(ctx, i, buf, slot):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
    ev = SimpleNamespace(_share_staged=True, _stage_requests=0, STAGE_MAX_REQUESTS_PER_SET=4, _share_bufs=[object()],
                         _fill_set=fill, device=torch.device("cpu"))
    with pytest.raises(ReferenceError_) as e:
        DeviceEvaluator._stage_set(ev, None, SimpleNamespace(n_sets=6), {"set": 1})
    assert e.value.oom and "staging input set 1" in str(e.value)
