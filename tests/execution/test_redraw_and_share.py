"""Input sets drawn again from their seeds instead of kept (``ProblemContext.redraw``), and the checks on
outputs a candidate describes in a shared device buffer (:mod:`kernelbench_harness.execution.devshare`).

On a GPU the sets are drawn there and drawn again at each use; here the same logic runs on the CPU with
``redraw=True``. The CUDA IPC mapping itself needs a GPU (``scripts/gpu/ipc_probe.py`` and the sweep);
what a CPU can check is the layout, the trusted side's validation of descriptions, and that a CPU run
never tries to share.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch

from execution.evalkit import FAST_KBENCH, describe, evaluate
from kernelbench_harness.core import Outcome, Problem
from kernelbench_harness.execution import devshare
from kernelbench_harness.execution.device import DeviceEvaluator, ProblemContext
from kernelbench_harness.execution.tensorio import TensorFormatError

CPU = torch.device("cpu")

_SRC = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, k):
        return x * k + DROPOUT


def get_inputs():
    return [DRAW, 3]


def get_init_inputs():
    return []
'''


def _problem(draw: str = "torch.randn(4, 64)", dropout: str = "0.0") -> Problem:
    return Problem(1, 931, "Redraw_test", _SRC.replace("DRAW", draw).replace("DROPOUT", dropout),
                   "tests/execution/test_redraw_and_share.py")


def test_redrawn_sets_equal_kept_sets_and_are_not_kept(tmp_path: Path) -> None:
    kept = ProblemContext(_problem(), FAST_KBENCH, 5, CPU, tmp_path / "kept", redraw=False)
    again = ProblemContext(_problem(), FAST_KBENCH, 5, CPU, tmp_path / "again", redraw=True)
    assert again.redraw and not kept.redraw
    assert all(v is None for v in again._sets_cpu)  # nothing kept on the host
    assert again.n_sets == kept.n_sets == FAST_KBENCH.correct_trials + 1
    for i in range(kept.n_sets):
        a, b = kept.set_values(i), again.set_values(i)
        assert torch.equal(a[0], b[0]) and a[1] == b[1] == 3, i
        b[0].add_(1.0)  # a caller writing into its copy changes no later draw
        assert torch.equal(again.set_values(i)[0], a[0])
    # the references (and their float64 twins) are the same either way
    for r, s in zip(kept.refs, again.refs):
        assert torch.equal(r[0], s[0])
    assert kept.fp64_judge and again.fp64_judge
    # files for the candidate process are written only when asked for, with the same bytes
    assert not list(again.inputs_dir.glob("set*"))
    assert again.sets_enc == kept.sets_enc
    for f in kept.inputs_dir.glob("set*"):
        assert f.read_bytes() == (again.inputs_dir / f.name).read_bytes()
    assert torch.equal(again.sets_cpu[2][0], kept.sets_cpu[2][0])


def test_a_draw_that_does_not_repeat_is_kept(tmp_path: Path) -> None:
    # get_inputs drawing from an unseeded generator of its own: a second draw differs
    ctx = ProblemContext(_problem("torch.randn(4, 64, generator=torch.Generator().manual_seed(__import__('os').getpid() "
                                  "+ __import__('time').perf_counter_ns()))"), FAST_KBENCH, 5, CPU, tmp_path, redraw=True)
    assert not ctx.redraw
    assert all(v is not None for v in ctx._sets_cpu)
    first = ctx.set_values(1)[0]
    assert torch.equal(ctx.set_values(1)[0], first)  # the kept copy, the same each time


def test_a_random_reference_is_still_flagged_with_redraws(tmp_path: Path) -> None:
    # each redraw seeds the generators; the reference's own random draws must not be reset by it
    ctx = ProblemContext(_problem(dropout="torch.rand_like(x)"), FAST_KBENCH, 5, CPU, tmp_path, redraw=True)
    assert ctx.redraw and "nondeterministic-reference" in ctx.flags


def test_candidates_evaluate_alike_with_redraws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from execution.evalkit import AFFINE
    from execution.test_reference_budget import CORRECT, WRONG

    orig = ProblemContext.__init__

    def init(self, *a, **k):  # noqa: ANN001, ANN002, ANN003
        k["redraw"] = True
        orig(self, *a, **k)

    monkeypatch.setattr(ProblemContext, "__init__", init)
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path, sandbox=False)
    try:
        res = evaluate(ev, CORRECT, AFFINE)
        assert res.outcome is Outcome.CORRECT, describe(res)
        assert res.extra.get("input_exchange") == "files"  # a CPU device never shares
        assert next(iter(ev._contexts.values())).redraw
        res = evaluate(ev, WRONG, AFFINE)
        assert res.outcome is Outcome.INCORRECT, describe(res)
    finally:
        ev.close()


def test_layout_aligns_every_tensor() -> None:
    places, n = devshare.layout([torch.zeros(3, dtype=torch.float16), 7, torch.zeros(5, 5), None,
                                 torch.zeros(0)])
    assert places[1] is None and places[3] is None
    assert [p["offset"] for p in places if p] == [0, 512, 1024]
    assert [p["nbytes"] for p in places if p] == [6, 100, 0]
    assert n == 1024  # the empty tensor at 1024 takes nothing
    assert devshare.available(CPU) is False


def _with_buffer(nbytes: int) -> DeviceEvaluator:
    ev = DeviceEvaluator.__new__(DeviceEvaluator)
    buf = torch.arange(nbytes, dtype=torch.int64).to(torch.uint8)
    ev._share_out = types.SimpleNamespace(tensor=buf, nbytes=nbytes, poisoned=0)  # type: ignore[assignment]

    def poison() -> None:
        ev._share_out.tensor.fill_(0xFF)
        ev._share_out.poisoned += 1

    ev._share_out.poison = poison
    return ev


def test_shared_output_descriptions_are_checked() -> None:
    ev = _with_buffer(4096)
    x = torch.randn(10, 12)
    ev._share_out.tensor[512:512 + x.numel() * 4].copy_(x.reshape(-1).view(torch.uint8))
    got = ev._shared_output({"shared": True, "offset": 512, "dtype": "float32", "shape": [10, 12]})
    assert torch.equal(got, x)
    ev._share_out.tensor.zero_()
    assert torch.equal(got, x)  # a copy: later writes into the buffer do not reach it
    bad = [
        {"shared": True, "offset": 4096 - 256, "dtype": "float32", "shape": [10, 12]},  # overruns
        {"shared": True, "offset": 100, "dtype": "float32", "shape": [2]},  # not aligned
        {"shared": True, "offset": -512, "dtype": "float32", "shape": [2]},
        {"shared": True, "offset": 0, "dtype": "object", "shape": [2]},
        {"shared": True, "offset": 0, "dtype": "float32", "shape": [-1, 4]},
        {"shared": True, "offset": True, "dtype": "float32", "shape": [2]},
        {"shared": True, "offset": 0, "dtype": "float32"},
        {"shared": True, "offset": 0, "dtype": "float64", "shape": [1 << 40]},
        {"shared": True, "offset": 0, "dtype": "float32", "shape": [0, 1 << 70]},  # no bytes, an absurd shape
        {"shared": True, "offset": 0, "dtype": "float32", "shape": [1] * 65},
    ]
    for d in bad:
        with pytest.raises(TensorFormatError):
            ev._shared_output(d)
    # once a message's outputs are read, the buffer is poisoned: the next message must write its own
    ev._share_out.tensor[:48].copy_(x.reshape(-1)[:12].view(torch.uint8))
    got = ev._read_outputs({"descs": [{"shared": True, "offset": 0, "dtype": "float32", "shape": [12]}]}, Path("."))
    assert torch.equal(got[0], x.reshape(-1)[:12]) and ev._share_out.poisoned == 1
    assert bool((ev._share_out.tensor == 0xFF).all())
    ev._share_out = None
    with pytest.raises(TensorFormatError, match="none was shared"):
        ev._shared_output({"shared": True, "offset": 0, "dtype": "float32", "shape": [2]})


def test_open_shared_refuses_malformed_handles() -> None:
    for handle, n in (("zz", 8), ("00" * 63, 8), ("00" * 64, 0), (None, 8)):
        with pytest.raises(devshare.DevShareError, match="malformed"):
            devshare.open_shared(handle, n, torch.device("cuda:0"))  # type: ignore[arg-type]


def test_a_candidate_process_that_cannot_map_shared_buffers_runs_again_with_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from execution.evalkit import AFFINE
    from execution.test_reference_budget import CORRECT

    from kernelbench_harness.core import EvalResult

    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path, sandbox=False)
    real = DeviceEvaluator._run_candidate
    calls: list[bool] = []

    def run(self, job, ctx, jobdir, findings, phase, **kw):  # noqa: ANN001, ANN003
        calls.append(kw.get("files_only", False))
        if not kw.get("files_only"):  # as if the process had said in its hello that mapping failed
            findings.append(None)
            return EvalResult(Outcome.RUNTIME_ERROR, error="shared device buffers: DevShareError: x",
                              extra={"share_failed": True})
        return real(self, job, ctx, jobdir, findings, phase, **kw)

    monkeypatch.setattr(DeviceEvaluator, "_run_candidate", run)
    try:
        res = evaluate(ev, CORRECT, AFFINE)
        assert res.outcome is Outcome.CORRECT, describe(res)
        assert calls == [False, True] and ev._share_ok is not False  # one failure does not switch it off
        assert None not in res.findings  # the failed attempt's findings are not kept
        res = evaluate(ev, CORRECT, AFFINE)
        assert res.outcome is Outcome.CORRECT and ev._share_ok is False  # the second does
        # text in a candidate's own error is no such report: a plain runtime error is not run again
        calls.clear()
        monkeypatch.setattr(DeviceEvaluator, "_run_candidate", lambda self, *a, **k: (calls.append(1), EvalResult(
            Outcome.RUNTIME_ERROR, error="RuntimeError: DevShareError: cuIpcOpenMemHandle failed"))[1])
        res = evaluate(ev, CORRECT, AFFINE)
        assert res.outcome is Outcome.RUNTIME_ERROR and calls == [1]
    finally:
        ev.close()


def test_nested_and_kept_inputs_draw_again_safely(tmp_path: Path) -> None:
    # nested lists of tensors compare item by item (they used to raise in ==)
    src = _SRC.replace("def forward(self, x, k):", "def forward(self, x, k, extra):").replace("DROPOUT", "0.0")
    src = src.replace("return [DRAW, 3]", "return [torch.randn(4, 64), 3, [torch.randn(2), {'a': 1.5}]]")
    nested = ProblemContext(Problem(1, 932, "Nested_test", src, "t.py"), FAST_KBENCH, 5, CPU, tmp_path / "n",
                            redraw=True)
    assert nested.redraw and not nested._copy_redraws
    assert torch.equal(nested.set_values(2)[2][0], nested.set_values(2)[2][0])
    # get_inputs handing out a tensor it keeps: each draw is copied, so writing into one changes no other
    kept_src = _SRC.replace("DROPOUT", "0.0").replace("def get_inputs():", "X = torch.randn(4, 64)\n\n\ndef get_inputs():")
    kept = ProblemContext(Problem(1, 933, "Kept_test", kept_src.replace("DRAW", "X"), "t.py"), FAST_KBENCH, 5, CPU,
                          tmp_path / "k", redraw=True)
    assert kept.redraw and kept._copy_redraws
    a = kept.set_values(1)
    a[0].add_(1.0)
    assert not torch.equal(kept.set_values(1)[0], a[0])


def test_a_redraw_that_lands_elsewhere_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kernelbench_harness.execution.device as device_mod

    ctx = ProblemContext(_problem(), FAST_KBENCH, 5, CPU, tmp_path, redraw=True)
    real = device_mod.draw_inputs
    monkeypatch.setattr(device_mod, "draw_inputs", lambda mod, seed, dev: (real(mod, seed, dev)[0], "device"))
    with pytest.raises(device_mod.ReferenceError_, match="could not be drawn again"):
        ctx.set_values(0)


def test_host_bound_callables_are_those_the_host_paced_in_most_trials() -> None:
    from kernelbench_harness.execution.device import host_bound_callables

    paced = {"launch_hidden_trials": 260, "launch_host_bound": 199}
    gpu = {"launch_hidden_trials": 84, "launch_host_bound": 0}
    half = {"launch_hidden_trials": 100, "launch_host_bound": 50}  # half is not most
    assert host_bound_callables(paced, {"eager": gpu, "compile:default": paced}) == ["candidate", "compile:default"]
    assert host_bound_callables(gpu, {"eager": half, "compile:default": None}) == []
    assert host_bound_callables(None, {"eager": paced}) == ["eager"]
    # timing info without either count (a CPU, an older store) or malformed: not host-bound
    assert host_bound_callables({"stopped": "ci"}, {"eager": {"launch_hidden_trials": "260",
                                                             "launch_host_bound": 199}}) == []
    # timed without hiding (several streams, kernelbench's protocol): the unhidden count decides
    unhidden = {"launch_unhidden_trials": 28, "launch_unhidden_host_bound": 27, "launch_host_share": 0.98}
    assert host_bound_callables(unhidden, {"eager": {"launch_unhidden_trials": 28,
                                                     "launch_unhidden_host_bound": 14}}) == ["candidate"]


def test_a_patched_json_encoder_does_not_reach_the_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate that patches json.JSONEncoder (which json.dumps builds on) cannot rewrite messages:
    the channel writes them with its own encoder, taken at import."""
    import json
    import socket

    from kernelbench_harness.execution.channel import Channel

    a, b = socket.socketpair()
    try:
        plain = json.JSONEncoder.encode
        monkeypatch.setattr(json.JSONEncoder, "encode", lambda self, o: plain(self, {"event": "forged"}))
        monkeypatch.setattr(socket.socket, "sendall", lambda self, data: None)  # nor its socket's sendall
        msg = {"event": "timing", "stats": {"median_ms": 2.5, "samples_ms": [2.5, float("nan")]}, "n": None}
        Channel(a).send(msg)
        got = Channel(b).recv(timeout_s=5)
        assert got["event"] == "timing" and got["stats"]["median_ms"] == 2.5 and got["n"] is None
        assert got["stats"]["samples_ms"][1] != got["stats"]["samples_ms"][1]  # NaN travels as NaN
    finally:
        a.close()
        b.close()


def test_staged_sets_reach_the_candidate_one_request_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # sets too large to share all at once (7 GiB and more for 18 current level-1 problems on an H200) go
    # through one staging buffer the trusted side fills on request. Here both ends run in this process
    # over CPU tensors: the worker's request, the trusted side's answer, the copies the worker keeps.
    from kernelbench_harness.execution import worker as worker_mod

    ctx = ProblemContext(_problem(), FAST_KBENCH, 5, CPU, tmp_path / "ctx", redraw=True)
    assert ctx.share_places is not None and ctx.redraw
    staging = types.SimpleNamespace(tensor=torch.full((ctx.share_set_nbytes,), 0xFF, dtype=torch.uint8))
    ev = DeviceEvaluator.__new__(DeviceEvaluator)
    ev.device = CPU
    ev._share_bufs = [staging, types.SimpleNamespace(tensor=torch.empty(0, dtype=torch.uint8))]
    ev._share_out = ev._share_bufs[1]
    ev._share_staged, ev._stage_requests = True, 0
    sent: list[dict] = []

    class Loop:  # the channel between the two ends: the worker's request is answered at once
        pending: list[dict] = []

        def send(self, obj: dict) -> None:
            self.pending.append(obj)

        def recv(self) -> dict:
            return self.pending.pop(0)

    trusted_h = types.SimpleNamespace(chan=Loop())
    job = worker_mod._Job.__new__(worker_mod._Job)
    job.device, job.precision, job.inputs_dir = CPU, torch.float32, ctx.inputs_dir
    job.share = {"sets": [{}], "staged": True}
    job.job = {"sets": [{"__staged__": i} for i in range(ctx.n_sets)], "cast_int_inputs": False}
    job.sets_cache = {}
    job.chan = trusted_h.chan

    def worker_send(obj: dict) -> None:  # the trusted side's expect() loop, on a need_set
        sent.append(obj)
        assert obj["event"] == "need_set"
        ev._stage_set(trusted_h, ctx, obj)
    monkeypatch.setattr(worker_mod._Job, "send", lambda self, obj: worker_send(obj))  # it sends through its class
    monkeypatch.setitem(worker_mod._MAPPED, ("set", 0), staging.tensor)

    got = [job.load_set(i) for i in range(ctx.n_sets)]
    assert [m["set"] for m in sent] == list(range(ctx.n_sets))  # one request per set
    for i, vals in enumerate(got):
        want = ctx.set_values(i)
        assert torch.equal(vals[0], want[0]) and vals[1] == want[1] == 3, i
        # the worker's own copies: the buffer now holds the last set, earlier sets are unchanged
        assert vals[0].data_ptr() != staging.tensor.data_ptr()
    assert list(job.sets_cache) == [ctx.n_sets - 1]  # only the latest set is kept
    assert job.load_set(ctx.n_sets - 1) is got[-1] and len(sent) == ctx.n_sets  # served from the cache
    # a request out of range, or of a non-integer, is a protocol violation
    for bad in (-1, ctx.n_sets, "0", True, None):
        with pytest.raises(TensorFormatError):
            ev._stage_set(trusted_h, ctx, {"event": "need_set", "set": bad})
    # a flood of requests (each a redraw of gigabytes, its answers unread) is a protocol violation
    ev._stage_requests = 0
    for _ in range(DeviceEvaluator.STAGE_MAX_REQUESTS_PER_SET * ctx.n_sets):
        ev._stage_set(trusted_h, ctx, {"event": "need_set", "set": 0})
    with pytest.raises(TensorFormatError, match="requests for input sets"):
        ev._stage_set(trusted_h, ctx, {"event": "need_set", "set": 0})
    # without a staging buffer (every set shared, or files) a request is a protocol violation too
    ev._share_staged, ev._stage_requests = False, 0
    with pytest.raises(TensorFormatError):
        ev._stage_set(trusted_h, ctx, {"event": "need_set", "set": 0})
    # an answer for another set than asked is refused by the worker
    job.sets_cache = {}
    monkeypatch.setattr(worker_mod._Job, "send",
                        lambda self, obj: trusted_h.chan.send({"cmd": "set_ready", "set": 0, "items": []}))
    with pytest.raises(RuntimeError, match="expected input set 2"):
        job.load_set(2)


def test_share_plan_stages_sets_too_large_to_share_at_once() -> None:
    from kernelbench_harness.execution.device import share_plan

    gib = 1 << 30
    h200 = 139 * gib
    assert share_plan(6, 6 * gib, 6 * gib, h200, 0.35) == "all"  # L1/20: 42 GiB of 48.7
    assert share_plan(6, 7 * gib, 7 * gib, h200, 0.35) == "staged"  # L1/4-type: 49 GiB
    assert share_plan(6, 16 * gib, 16 * gib, h200, 0.35) == "staged"  # L1/45: 112 GiB, one set 32
    assert share_plan(6, 30 * gib, 30 * gib, h200, 0.35) is None  # not even one set: files


def test_timing_cycles_through_fewer_sets_when_they_are_huge() -> None:
    from kernelbench_harness.execution.device import timing_set_count

    gib = 1 << 30
    h200 = 139 * gib
    assert timing_set_count(3, 5, 1 << 20, h200) == 3  # small sets: as the protocol says
    assert timing_set_count(3, 5, 6 * gib, h200) == 2  # L1/20: 2 x 2 x 6 GiB within 34.75 GiB
    assert timing_set_count(3, 5, 16 * gib, h200) == 1  # L1/45
    assert timing_set_count(3, 5, 40 * gib, h200) == 1  # never none
    assert timing_set_count(3, 5, 16 * gib, None) == 3  # off a GPU: no limit
    assert timing_set_count(3, 1, 0, h200) == 1 and timing_set_count(1, 5, 0, h200) == 1
