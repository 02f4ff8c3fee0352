"""What a job's memory claim counts (H200 session 13): the copies the candidate's process really holds
during a correctness call, the reference's measured forward temporaries, and the slot's cached context
between jobs; the job's recorded high-water mark survives the measurement inside it."""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

import torch

from kernelbench_harness.execution import device as device_mod
from kernelbench_harness.execution import worker as worker_mod
from kernelbench_harness.execution.device import DeviceEvaluator, ProblemContext
from kernelbench_harness.execution.tensorio import LARGE_SET_BYTES, encode_value
from kernelbench_harness.problems import Problem
from kernelbench_harness.protocols import get_protocol

GIB = 1 << 30
H200 = int(139.8 * GIB)


MIB = 1 << 20


def test_work_counts_the_candidates_copies_and_the_temporaries_where_they_are_made():
    w = DeviceEvaluator.work_nbytes
    s = o = 64 * MIB  # a small job: the candidate's and the trusted side's memory at once
    base = w(s, o, False, own_copies=0)
    # the clone called on, the pristine copy, output + poisoned block; the trusted side's set and outputs
    assert base == (2 * s + 2 * o) + (s + 2 * o)
    assert w(s, o, False, own_copies=1) - base == s  # a staged set: the process's own copy
    assert w(s, o, False, own_copies=6) - base == 6 * s  # small sets from files: it keeps each
    # the forward's temporaries, in the candidate's process and on the trusted side (which runs the
    # reference again after timing and for the ablation, stored references or not)
    assert w(s, o, False, own_copies=0, temp_bytes=3 * s) - base == 6 * s
    # the float64 judge: the upcasts, and the larger of the two forwards' temporaries on the trusted side
    fp64 = w(s, o, True, own_copies=0)
    assert fp64 - base == 2 * s + 2 * o
    assert w(s, o, True, own_copies=0, temp64_bytes=5 * s) - fp64 == 5 * s
    assert w(s, o, True, own_copies=0, temp_bytes=3 * s, temp64_bytes=5 * s) - fp64 == 3 * s + 5 * s
    assert w(s, o, True, own_copies=0, temp_bytes=5 * s, temp64_bytes=3 * s) - fp64 == 5 * s + 5 * s
    assert w(s, o, False, own_copies=0, temp64_bytes=5 * s) == base  # no float64 forward without its judge


def test_a_large_jobs_candidate_and_judging_take_turns():
    w = DeviceEvaluator.work_nbytes
    s = o = GIB  # set and outputs over LARGE_SET_BYTES: each side hands its copies back before the other
    candidate = 3 * s + 2 * o  # own copy, clone, pristine; output and poisoned block
    # the candidate's output copied out, and at most a set's float64 upcast and the twin's outputs (or the
    # twin's outputs, a set and the reference's outputs): the two forwards run on copies of their own
    trusted = o + 2 * s + 2 * o
    # beside the judging: the process's own copy of the set, and the timing buffer kept for the re-check
    assert w(s, o, True, own_copies=1) == max(candidate, trusted + 2 * s) == trusted + 2 * s == 7 * GIB
    assert w(s, o, True, own_copies=0) == trusted + s  # mapped sets: only the timing buffer stays
    # the twin's forward temporaries count beside the upcast, the reference's beside its outputs
    assert w(s, o, True, own_copies=1, temp64_bytes=GIB) == trusted + 2 * s + GIB
    assert w(s, o, True, own_copies=1, temp_bytes=GIB) == o + (s + 3 * o + GIB) + 2 * s  # 1 set, 3 outputs, temps
    # a large set with a small output (a reduction): the set and its upcast at once
    assert w(4 * s, 0, True, own_copies=1) == 3 * 4 * s + 2 * 4 * s
    # without the float64 judge: a set refreshed (two copies), or a set and the reference's outputs
    assert w(s, o, False, own_copies=0) == max(2 * s + 2 * o, o + 2 * s + s)
    # a reference whose forward temporaries dwarf its set: the candidate's turn is the larger
    assert w(s, o, False, own_copies=1, temp_bytes=20 * GIB) == candidate + 20 * GIB
    # just below the threshold the two are summed
    small = (LARGE_SET_BYTES - 2) // 2
    assert w(small, small, True, own_copies=1) == (3 * small + 2 * small) + (3 * small + 4 * small)


def _ctx(set_gib: float, out_gib: float, *, temp_gib: float = 0.0, temp64_gib: float = 0.0, cast: bool = False):
    return SimpleNamespace(n_sets=6, share_set_nbytes=int(set_gib * GIB), share_places=[{}],
                           out_nbytes=int(out_gib * GIB), lazy_refs=True, ref_estimate_bytes=0,
                           protocol=SimpleNamespace(rotate_inputs=3), n_correct=5, memory_share=1.0,
                           fp64_judge=True, ref_temp_bytes=int(temp_gib * GIB), ref64_temp_bytes=int(temp64_gib * GIB),
                           cast_copies=cast)


def _planner(share_ok=None):
    slot = SimpleNamespace(_share_ok=share_ok, SHARE_MAX_FRACTION=DeviceEvaluator.SHARE_MAX_FRACTION,
                           _share_out_nbytes=DeviceEvaluator._share_out_nbytes, work_nbytes=DeviceEvaluator.work_nbytes,
                           weights_nbytes=DeviceEvaluator.weights_nbytes)
    return lambda ctx, share: DeviceEvaluator._planner(slot, ctx, H200)(share)


def test_a_plan_claims_the_references_measured_temporaries():
    plan = _planner()
    # L3/31 in session 13: an attention whose temporaries dwarf its inputs (24 GiB in the candidate's
    # process, 56 GiB on the trusted side) on a 4.9 GiB claim
    small = plan(_ctx(0.01, 0.01), 1.0)
    hot = plan(_ctx(0.01, 0.01, temp_gib=8.0, temp64_gib=16.0), 1.0)
    assert hot.exchange == small.exchange == "all"
    # the candidate's forward, and the trusted side's larger (the float64 one); a small job sums the sides
    assert hot.nbytes - small.nbytes == 8 * GIB + 16 * GIB


def test_a_plan_claims_the_weights_each_side_holds():
    plan = _planner()
    # L3/2 in session 14: 8 GiB of weights on 8 MiB of inputs, 44 GiB held on the 4.9 GiB floor
    light = plan(_ctx(0.01, 0.01), 1.0)
    heavy = _ctx(0.01, 0.01)
    heavy.weight_init_bytes, heavy.weight_bytes, heavy.weight64_bytes = 8 * GIB, 8 * GIB, 16 * GIB
    # the candidate's ModelNew and its ablation copy; the reference and its float64 twin
    assert plan(heavy, 1.0).nbytes - light.nbytes == 2 * 8 * GIB + 8 * GIB + 16 * GIB
    # a protocol without the kernel-ablation call makes no copy of the candidate's model
    heavy.protocol = SimpleNamespace(rotate_inputs=3, ablate_kernels=False)
    assert plan(heavy, 1.0).nbytes - light.nbytes == 8 * GIB + 8 * GIB + 16 * GIB


def test_a_files_staged_or_cast_plan_counts_the_processs_own_copies():
    plan = _planner()
    ctx = _ctx(0.02, 0.08)  # small sets, output-heavy: the judging is larger than the timing copies
    shared = plan(ctx, 1.0)
    files = _planner(share_ok=False)(ctx, 1.0)
    assert shared.exchange == "all" and files.exchange == "files"
    s, o = ctx.share_set_nbytes, ctx.out_nbytes
    work_all = DeviceEvaluator.work_nbytes(s, o, True, own_copies=0)
    assert shared.nbytes == 6 * s + DeviceEvaluator._share_out_nbytes(ctx) + work_all
    assert files.nbytes == DeviceEvaluator.work_nbytes(s, o, True, own_copies=6) == work_all + 6 * s
    # mapped sets cast to the run's precision (fp16 runs, integer inputs cast): copies of its own too
    cast = plan(_ctx(0.02, 0.08, cast=True), 1.0)
    assert cast.exchange == "all" and cast.nbytes == shared.nbytes + 6 * s
    # a large job keeps only its latest set (worker.py, load_set)
    big = _ctx(4.0, 4.0)
    staged = plan(big, 0.2)
    assert staged.exchange == "staged"
    assert staged.nbytes - 4 * GIB - DeviceEvaluator._share_out_nbytes(big) \
        == max((2 * staged.timing_sets + 1) * 4 * GIB, DeviceEvaluator.work_nbytes(4 * GIB, 4 * GIB, True, own_copies=1))


PROBLEM = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.sum(dim=1)\n"
           "def get_inputs():\n    return [torch.rand(64, 32)]\ndef get_init_inputs():\n    return []\n")


def test_the_context_records_the_forwards_temporaries_beyond_its_outputs(tmp_path, monkeypatch):
    calls: list[str] = []

    def fake_peak(device, fn):  # what torch.cuda's counters would report on a GPU: 1 MiB above the base
        out = fn()
        calls.append("measured")
        return out, (1 << 20)

    monkeypatch.setattr(device_mod, "_peak_during", fake_peak)
    ctx = ProblemContext(Problem(1, 9901, "Sum_test", PROBLEM), get_protocol("kbench"), 3, torch.device("cpu"),
                         tmp_path)
    out_nb = 64 * 4  # one float32 per row
    assert calls == ["measured", "measured"]  # the run-precision forward and the float64 twin's, once each
    assert ctx.ref_temp_bytes == (1 << 20) - out_nb
    assert ctx.ref64_temp_bytes == (1 << 20) - 2 * out_nb
    info = ctx.reference_info()
    assert info["reference_temp_bytes"] == ctx.ref_temp_bytes and info["reference64_temp_bytes"] == ctx.ref64_temp_bytes
    # the stored float64 references are those of each set (set 0's reused from the measured call)
    assert ctx.refs64 is not None and len(ctx.refs64) == ctx.n_sets
    for i in range(ctx.n_sets):
        x = ctx.set_values(i)[0].double()
        assert torch.equal(ctx.refs64[i][0], x.sum(dim=1))


LINEAR = ("import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
          "        self.fc = torch.nn.Linear(32, 8)\n        self.register_buffer('scale', torch.ones(8))\n"
          "    def forward(self, x):\n        return self.fc(x) * self.scale\n"
          "def get_inputs():\n    return [torch.rand(64, 32)]\ndef get_init_inputs():\n    return []\n")


def test_the_context_records_its_weights(tmp_path):
    ctx = ProblemContext(Problem(1, 9903, "Linear_test", LINEAR), get_protocol("kbench"), 3, torch.device("cpu"),
                         tmp_path)
    assert ctx.weight_init_bytes == (32 * 8 + 8 + 8) * 4  # weight, bias and the buffer, as constructed
    # device memory only: on the CPU none (the ledger runs on GPUs only)
    assert ctx.weight_bytes == 0 and ctx.weight64_bytes == 0
    info = ctx.reference_info()
    assert info["reference_weight_bytes"] == 0 and info["reference64_weight_bytes"] == 0
    # the float64 twin: cast from the host copy, the same values
    m64 = ctx._model64()
    assert m64.fc.weight.dtype == torch.float64
    assert torch.equal(m64.fc.weight, ctx.model_cpu.fc.weight.double())
    assert device_mod.module_nbytes(torch, m64) == 2 * ctx.weight_init_bytes
    assert device_mod.module_nbytes(torch, m64, device_only=True) == 0


def test_the_float64_twins_weights_are_its_own_and_none_without_one(tmp_path, monkeypatch):
    # count CPU tensors as the GPU's would be (device_only has nothing to count on this machine)
    real = device_mod.module_nbytes
    monkeypatch.setattr(device_mod, "module_nbytes", lambda torch_, m, device_only=False: real(torch_, m))
    proto = get_protocol("kbench")
    ctx = ProblemContext(Problem(1, 9904, "Linear_test", LINEAR), proto, 3, torch.device("cpu"), tmp_path / "a")
    assert ctx.fp64_judge and ctx.weight_bytes == ctx.weight_init_bytes
    assert ctx.weight64_bytes == 2 * ctx.weight_init_bytes  # the twin's, not the reference's
    # a random reference has no twin
    rand = LINEAR.replace("return self.fc(x) * self.scale", "return self.fc(x) * torch.rand(1)")
    ctx = ProblemContext(Problem(1, 9905, "Rand_test", rand), proto, 3, torch.device("cpu"), tmp_path / "b")
    assert not ctx.fp64_judge and ctx.weight64_bytes == 0
    # the twin fails after it was built: judged with allclose, no twin counted

    def failing(self, *a, **k):
        m = real_model64(self, *a, **k)
        m.forward = lambda *a: (_ for _ in ()).throw(RuntimeError("no float64 kernel"))
        return m
    real_model64 = ProblemContext._model64
    monkeypatch.setattr(ProblemContext, "_model64", failing)
    ctx = ProblemContext(Problem(1, 9906, "Linear_test", LINEAR), proto, 3, torch.device("cpu"), tmp_path / "c")
    assert not ctx.fp64_judge and "no-fp64-reference" in ctx.flags and ctx.weight64_bytes == 0


# L3/44 (MiniGPTBlock) holds a lambda that closes over its MLP: a deep copy's lambda still calls the original's
# float32 modules, and its float64 twin failed ("mat1 and mat2 must have the same dtype")
CLOSURE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.mlp = nn.ModuleDict(dict(fc=nn.Linear(n, n), proj=nn.Linear(n, n)))
        m = self.mlp
        self.mlpf = lambda x: m.proj(torch.tanh(m.fc(x)))
        self.register_buffer("shift", torch.full((n,), 0.5), persistent=False)

    def forward(self, x):
        return self.mlpf(x) + self.shift


def get_inputs():
    return [torch.rand(4, 16)]


def get_init_inputs():
    return [16]
"""


def test_a_model_whose_lambda_closes_over_its_modules_gets_a_float64_twin(tmp_path):
    ctx = ProblemContext(Problem(3, 9944, "Closure_test", CLOSURE), get_protocol("kbench"), 3, torch.device("cpu"),
                         tmp_path)
    assert ctx.fp64_judge and "no-fp64-reference" not in ctx.flags, ctx.flags
    m64 = ctx._m64
    assert m64.mlp.fc.weight.dtype == torch.float64 and m64.shift.dtype == torch.float64
    # the weights and the non-persistent buffer are the reference's, not a new draw
    assert torch.equal(m64.mlp.fc.weight, ctx.model_cpu.mlp.fc.weight.double())
    assert torch.equal(m64.shift, ctx.model_cpu.shift.double())
    # and its outputs are the reference's own computation in float64
    x = ctx.set_values(0)[0]
    want = ctx.model_cpu.mlp.proj(torch.tanh(ctx.model_cpu.mlp.fc(x.double().float()))) + 0.5
    out64 = ctx.refs64[0][0] if isinstance(ctx.refs64[0], (list, tuple)) else ctx.refs64[0]
    assert out64.dtype == torch.float64 and torch.allclose(out64.float(), want, atol=1e-5)


def test_on_the_cpu_nothing_is_measured(tmp_path):
    ctx = ProblemContext(Problem(1, 9902, "Sum_test", PROBLEM), get_protocol("kbench"), 3, torch.device("cpu"),
                         tmp_path)
    assert ctx.ref_temp_bytes == 0 and ctx.ref64_temp_bytes == 0


class _FakeAllocator:
    """torch.cuda's memory counters for one device, driven by the test."""

    def __init__(self) -> None:
        self.allocated = 0
        self.peak_alloc = 0
        self.peak_reserved = 0

    def alloc(self, n: int) -> None:
        self.allocated += n
        self.peak_alloc = max(self.peak_alloc, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.allocated)

    def install(self, monkeypatch) -> None:
        def reset(d=None):
            self.peak_alloc = self.allocated
            self.peak_reserved = self.allocated
        monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d=None: self.allocated)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: self.peak_alloc)
        monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda d=None: self.peak_reserved)
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)


def test_the_measurement_keeps_the_jobs_high_water_mark(monkeypatch):
    fake = _FakeAllocator()
    fake.install(monkeypatch)
    dev = torch.device("cuda:0")
    device_mod._device_peak(dev, reset=True)
    fake.alloc(10 * GIB)  # the job's peak so far
    fake.alloc(-9 * GIB)

    def forward():
        fake.alloc(3 * GIB)  # temporaries
        fake.alloc(-2 * GIB)  # freed; 1 GiB of output stays
        return "out"

    out, peak = device_mod._peak_during(dev, forward)
    assert out == "out" and peak == 3 * GIB
    assert device_mod._device_peak(dev) == 10 * GIB  # not the 4 GiB the reset counter alone would say
    device_mod._device_peak(dev, reset=True)  # a new job
    assert device_mod._device_peak(dev) == 2 * GIB


def test_a_slot_frees_a_large_context_when_its_job_ends(monkeypatch):
    fake = _FakeAllocator()
    fake.install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    freed: list[str] = []
    released: list[int] = []

    def slot_with(allocated: int):
        fake.allocated = allocated
        ctx = SimpleNamespace(free=lambda: freed.append("ctx"))
        slot = SimpleNamespace(_job_claim=0.5, memory_ledger=SimpleNamespace(release=lambda: released.append(1)),
                               device=torch.device("cuda:0"), _contexts={("p", "k", 1): ctx},
                               CONTEXT_KEEP_MAX_BYTES=DeviceEvaluator.CONTEXT_KEEP_MAX_BYTES)
        slot._free_contexts = lambda: DeviceEvaluator._free_contexts(slot)
        return slot

    small = slot_with(100 << 20)
    DeviceEvaluator._give_memory_back(small, free_contexts=True)
    assert freed == [] and small._contexts and released == [1] and small._job_claim == 0.0
    big = slot_with(6 * GIB)  # e.g. an L3 model with its float64 copy and stored references
    DeviceEvaluator._give_memory_back(big)  # a standalone baseline measurement: its caller reads the context
    assert freed == [] and big._contexts and released == [1, 1]
    DeviceEvaluator._give_memory_back(big, free_contexts=True)  # a candidate's job ends
    assert freed == ["ctx"] and big._contexts == {} and released == [1, 1, 1]


def _loader(tmp_path: Path, share=None, large=False):
    sets = []
    for i in range(3):
        sets.append(encode_value([torch.full((64, 64), float(i))], tmp_path, f"set{i}_", [0]))
    job = SimpleNamespace(sets_cache={}, job={"sets": sets, "large": large}, share=share, device=torch.device("cpu"),
                          precision=torch.float32, inputs_dir=tmp_path)
    job.large = worker_mod._Job.large.fget(job)
    return job


def test_the_candidates_process_keeps_one_large_set_read_from_files(tmp_path):
    job = _loader(tmp_path)
    for i in range(3):
        worker_mod._Job.load_set(job, i)
    assert sorted(job.sets_cache) == [0, 1, 2]  # a small job: all kept (read once each)
    job = _loader(tmp_path, large=True)  # the trusted side's word, from the sizes its plan used
    for i in range(3):
        vals = worker_mod._Job.load_set(job, i)
        assert float(vals[0][0, 0]) == float(i)
    assert list(job.sets_cache) == [2]  # only the latest: the claim counts one copy of the process's own
    assert worker_mod._Job.load_set(job, 2) is job.sets_cache[2]


def test_the_context_says_whether_a_job_is_large(tmp_path):
    ctx = ProblemContext(Problem(1, 9905, "Sum_test", PROBLEM), get_protocol("kbench"), 3, torch.device("cpu"),
                         tmp_path)
    assert not ctx.large and ctx.job_fields()["large"] is False
    ctx.share_set_nbytes = LARGE_SET_BYTES - ctx.out_nbytes  # the planner's sizes: set + outputs
    assert ctx.large and ctx.job_fields()["large"] is True
    ctx.share_set_nbytes = 0
    ctx.set_nbytes = LARGE_SET_BYTES  # a set of nested values (not shareable): its tensors' bytes count
    assert ctx.large


NESTED = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, xs):\n        return xs[0] + xs[1]\n"
          "def get_inputs():\n    return [[torch.rand(8, 8), torch.rand(8, 8)]]\ndef get_init_inputs():\n    return []\n")


def test_a_nested_sets_bytes_are_counted(tmp_path):
    ctx = ProblemContext(Problem(1, 9906, "Nested_test", NESTED), get_protocol("kbench"), 3, torch.device("cpu"),
                         tmp_path)
    assert ctx.share_set_nbytes == 0 and ctx.set_nbytes == 2 * 8 * 8 * 4


def _trial_job(events: list, nbytes_out: int):
    """What _Job.run_trial uses, recording the order of its hand-back and its message, and which tensors
    the trial's frame still holds when it hands its memory back."""
    import sys

    job = SimpleNamespace(protocol={"clone_inputs": True}, job={"out_nbytes": nbytes_out, "large": True},
                          device=torch.device("cpu"), findings=[], phase_s={}, out_cursor=0,
                          record=SimpleNamespace(calls={}), launches=SimpleNamespace(triton=0), host_work_on=False,
                          trial_launches=[])
    cached = [torch.ones(256, 256)]
    job._add_phase = lambda name, s: worker_mod._Job._add_phase(job, name, s)
    job.load_set = lambda idx: cached
    job.poison = lambda n: None
    job.call = lambda args: args[0] * 2
    job.sync = lambda: None
    job.describe_output = lambda o, name: {"shape": list(o.shape)}
    job.check_integrity = lambda where: None

    def release_large():
        held = [v for k, v in sys._getframe(1).f_locals.items() if isinstance(v, torch.Tensor)
                or (isinstance(v, list) and any(isinstance(x, torch.Tensor) for x in v) and v is not cached)]
        events.append(("release", len(held)))
    job.release_large = release_large
    return job


def test_a_trial_hands_its_copies_back_before_it_reports_the_output(monkeypatch):
    # the trusted side judges as soon as the message arrives: the hand-back comes first, and no name in the
    # trial still holds one of its copies (the clone, the pristine copy, the output, the loops' last items);
    # only the process's own copy of the set (``inputs``, cached) stays
    events: list = []
    job = _trial_job(events, 256 * 256 * 4)
    # (the worker sends through its class, _Job.send(job, msg))
    monkeypatch.setattr(worker_mod._Job, "send", lambda self, msg: events.append(("send", msg["event"])))
    assert worker_mod._Job.run_trial(job, 0)
    assert events == [("release", 0), ("send", "output")]


def test_release_large_empties_the_cache_only_for_a_large_job_on_a_gpu(monkeypatch):
    emptied: list[int] = []
    # the function captured at import (a candidate replacing torch.cuda.empty_cache changes nothing here)
    monkeypatch.setattr(worker_mod._timing, "_empty_cache", lambda: emptied.append(1))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append("replaced"))
    job = SimpleNamespace(device=torch.device("cuda:0"), sync=lambda: None, large=False)
    worker_mod._Job.release_large(job)
    assert emptied == []
    job.large = True
    worker_mod._Job.release_large(job)
    assert emptied == [1]
    job.device = torch.device("cpu")
    worker_mod._Job.release_large(job)
    assert emptied == [1]


def test_nested_measurements_each_see_their_own_peak_and_errors_propagate(monkeypatch):
    fake = _FakeAllocator()
    fake.install(monkeypatch)
    dev = torch.device("cuda:0")
    device_mod._device_peak(dev, reset=True)

    def inner_a():
        fake.alloc(5 * GIB)
        fake.alloc(-5 * GIB)

    def inner_b():
        fake.alloc(2 * GIB)
        fake.alloc(-2 * GIB)

    def outer():  # the set-up (context()) around the reference's measured forwards
        fake.alloc(GIB)
        _, a = device_mod._peak_during(dev, inner_a)
        _, b = device_mod._peak_during(dev, inner_b)  # its reset must not lose inner_a's peak for outer
        return a, b

    (a, b), whole = device_mod._peak_during(dev, outer)
    assert (a, b, whole) == (5 * GIB, 2 * GIB, 6 * GIB)
    assert device_mod._ACTIVE_PEAKS == []

    def boom():
        fake.alloc(GIB)
        raise torch.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(torch.OutOfMemoryError):
        device_mod._peak_during(dev, boom)
    assert device_mod._ACTIVE_PEAKS == []


INT_PROBLEM = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x, i):\n        return x + i\n"
               "def get_inputs():\n    return [torch.rand(8, 8), torch.randint(0, 4, (8, 8))]\n"
               "def get_init_inputs():\n    return []\n")


def test_the_context_knows_when_the_candidates_process_casts_copies(tmp_path):
    p = Problem(1, 9903, "Int_test", INT_PROBLEM)
    dev = torch.device("cpu")
    assert not ProblemContext(p, get_protocol("kbench"), 3, dev, tmp_path / "a").cast_copies  # ints stay ints
    assert ProblemContext(p, get_protocol("kernelbench"), 3, dev, tmp_path / "b").cast_copies  # ints cast
    assert not ProblemContext(Problem(1, 9904, "Sum_test", PROBLEM), get_protocol("kbench"), 3, dev,
                              tmp_path / "c").cast_copies


def test_the_candidates_process_keeps_one_large_cast_copy_of_mapped_sets(tmp_path):
    from kernelbench_harness.execution.tensorio import read_tensor

    job = _loader(tmp_path, share={"sets": []}, large=True)  # a share: sets described as mapped are views
    job.shared_input = lambda d: read_tensor(d, tmp_path)  # (the mapped buffer's view, on this CPU)
    for i in range(3):
        worker_mod._Job.load_set(job, i)
    assert sorted(job.sets_cache) == [0, 1, 2]  # views used as they are: nothing of its own to drop
    job = _loader(tmp_path, share={"sets": []}, large=True)
    job.shared_input = lambda d: read_tensor(d, tmp_path)
    job.precision = torch.float16  # every float set is cast: copies of its own
    for i in range(3):
        worker_mod._Job.load_set(job, i)
    assert list(job.sets_cache) == [2]


def test_baselines_with_info_returns_the_info_kept_before_the_context_was_freed():
    slot = SimpleNamespace(last_baseline_info={})

    def measure(p, pr, s, modes):  # measure_baselines keeps each mode's info, then may free the context
        slot.last_baseline_info = {"eager": {"compile_s": 0.0}, "compile:default": {"error": "x"}}
        return {"eager": "stats"}
    slot.measure_baselines = measure
    stats, info = DeviceEvaluator.baselines_with_info(slot, None, None, 0, ["eager", "compile:default", "x"])
    assert stats == {"eager": "stats"}
    assert info == {"eager": {"compile_s": 0.0}, "compile:default": {"error": "x"}, "x": None}


def test_a_check_the_trusted_side_could_not_judge_is_recorded_not_silent():
    """The kernel-ablation and timed-output checks give no finding when the trusted side cannot judge (out
    of device memory beside other slots' jobs): the result's ``integrity_checks`` says so."""
    def oom(*a, **k):
        raise device_mod.ReferenceError_("the reference ran out of device memory", oom=True)

    ctx = SimpleNamespace(problem=SimpleNamespace(key="L1/1"), n_sets=3, compare_on=oom)
    slot = SimpleNamespace(_read_outputs=lambda msg, jobdir: [torch.zeros(2)], ABLATION_ROUND=7)
    checks: dict = {}
    findings: list = []
    DeviceEvaluator._check_timed_output(slot, ctx, {"set": 0, "round": 3, "descs": []}, Path("."), findings, checks)
    assert checks == {"timed_output": "not judged: out of device memory"} and findings == []
    sent = []
    h = SimpleNamespace(chan=SimpleNamespace(send=sent.append))
    DeviceEvaluator._ablate(slot, h, ctx, Path("."), findings, lambda d, what: {"descs": [{}]}, 0.0, checks)
    assert checks["kernel_ablation"] == "not judged: out of device memory" and findings == []
    DeviceEvaluator._ablate(slot, h, ctx, Path("."), findings,
                            lambda d, what: {"skipped": "no Triton launch in the correctness calls"}, 0.0, checks)
    assert checks["kernel_ablation"] == "skipped: no Triton launch in the correctness calls"
    # judged: recorded as judged (a later block judged does not hide an earlier one that was not); the
    # ablated output is wrong (the kernels do the work), the timed one right
    ctx.compare_on = lambda i, round_, outs: SimpleNamespace(ok=round_ != slot.ABLATION_ROUND)
    DeviceEvaluator._check_timed_output(slot, ctx, {"set": 0, "round": 3, "descs": []}, Path("."), findings, checks)
    assert checks["timed_output"] == "not judged: out of device memory"
    fresh: dict = {}
    DeviceEvaluator._check_timed_output(slot, ctx, {"set": 0, "round": 3, "descs": []}, Path("."), findings, fresh)
    DeviceEvaluator._ablate(slot, h, ctx, Path("."), findings, lambda d, what: {"descs": [{}]}, 0.0, fresh)
    assert fresh == {"timed_output": "judged", "kernel_ablation": "judged"} and findings == []


HUBER = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, p, t):\n"
         "        return torch.nn.functional.smooth_l1_loss(p, t)\n"
         "def get_inputs():\n    return [torch.rand(512, 1024), torch.rand(512, 1024)]\ndef get_init_inputs():\n    return []\n")


def test_a_scalar_output_that_keeps_its_whole_elementwise_buffer_is_stored_on_its_own(tmp_path):
    """KernelBench L1/96 (H200 session 17): smooth_l1_loss returns a 0-dim mean whose storage is the whole
    elementwise buffer. Six stored references and their float64 twins held 72 GiB for a scalar output, which
    the memory plan counted as 72 bytes; with the whole device claimed the candidate ran out of memory."""
    import torch.nn.functional as F

    raw = F.smooth_l1_loss(torch.rand(512, 1024), torch.rand(512, 1024))
    assert raw.untyped_storage().nbytes() == 512 * 1024 * 4  # (what torch does: the reason for the copy)
    ctx = ProblemContext(Problem(1, 9907, "Huber_test", HUBER), get_protocol("kbench"), 3, torch.device("cpu"),
                         tmp_path)
    assert ctx.out_nbytes == 4 and ctx.refs64 is not None
    for ref in ctx.refs + ctx.refs64:
        assert ref[0].dim() == 0 and ref[0].untyped_storage().nbytes() == ref[0].element_size()
    p, t = ctx.set_values(2)
    assert ctx.refs[2][0].item() == F.smooth_l1_loss(p, t).item()  # the same value
    # outputs that are their storage, or views of a little more of it, are kept as they are (no copy)
    x = torch.rand(256, 256)  # 256 KiB
    assert device_mod._detach_outputs([x.t()])[0].data_ptr() == x.data_ptr()
    assert device_mod._detach_outputs([x[:1]])[0].data_ptr() == x.data_ptr()  # 255 KiB more: under the floor
    big = torch.rand(1024, 1024)  # 4 MiB
    row = device_mod._detach_outputs([big[:1]])[0]
    assert row.data_ptr() != big.data_ptr() and torch.equal(row, big[:1]) and row.untyped_storage().nbytes() == 4096
    part = device_mod._detach_outputs([big[:600]])[0]  # 60% of its storage: 1.6 MiB more
    assert part.data_ptr() != big.data_ptr() and torch.equal(part, big[:600])
    # the pieces of one buffer that together are all of it keep it as it is
    a, b = torch.chunk(big, 2)
    pieces = device_mod._detach_outputs((a, b))
    assert pieces[0].data_ptr() == big.data_ptr() and pieces[1].data_ptr() == b.data_ptr()


class _LiveBytes:
    """Peak bytes of live tensor storage while it is entered (CPU tensors): what the CUDA allocator's
    allocated high-water mark counts, for a stand-in of the trusted side's judging on the CPU."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202
                out = func(*args, **(kwargs or {}))
                for t in torch.utils._pytree.tree_flatten(out)[0]:
                    if isinstance(t, torch.Tensor):
                        outer._track(t.untyped_storage())
                return out
        self.mode = Mode()
        self.live: dict[int, int] = {}
        self.now = self.peak = 0

    def _track(self, st: torch.UntypedStorage) -> None:
        import weakref

        key, n = st.data_ptr(), st.nbytes()
        if n == 0 or key in self.live:
            return
        self.live[key] = n
        self.now += n
        self.peak = max(self.peak, self.now)

        def gone() -> None:
            if self.live.pop(key, None) is not None:
                self.now -= n
        weakref.finalize(st, gone)

    def __enter__(self) -> "_LiveBytes":
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.mode.__exit__(*exc)


_ELEMENTWISE = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
                "def get_inputs():\n    return [torch.randn(64, 4096)]\ndef get_init_inputs():\n    return []\n")
_REDUCTION = _ELEMENTWISE.replace("torch.relu(x)", "x.sum(dim=1)")
# two floating inputs and an integer one (indices: never cast, never refreshed, upcast as they are)
_GATHER = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x, y, i):\n"
           "        return (x * y).gather(1, i)\n"
           "def get_inputs():\n    return [torch.randn(64, 4096), torch.randn(64, 4096), torch.randint(0, 4096, (64, 2048))]\n"
           "def get_init_inputs():\n    return []\n")


# a half-precision set (get_inputs returns float16), and a boolean mask (cast to floats under the kernelbench protocol)
_HALF_IN = _ELEMENTWISE.replace("torch.randn(64, 4096)", "torch.randn(64, 4096).half()")
_MASKED = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x, m):\n        return torch.cumsum(x * m, dim=1)\n"
           "def get_inputs():\n    return [torch.randn(64, 4096), torch.rand(64, 4096) > 0.5]\n"
           "def get_init_inputs():\n    return []\n")
_JUDGED = [  # id, problem, protocol, precision, overrides, large
    ("elementwise", _ELEMENTWISE, "kbench", "fp32", {}, True),
    ("reduction", _REDUCTION, "kbench", "fp32", {}, True),
    ("gather", _GATHER, "kbench", "fp32", {}, True),
    ("elementwise-fp16", _ELEMENTWISE, "kbench", "fp16", {}, True),
    ("elementwise-bf16", _ELEMENTWISE, "kbench", "bf16", {}, True),
    ("gather-fp16", _GATHER, "kbench", "fp16", {}, True),
    ("half-inputs-fp16", _HALF_IN, "kbench", "fp16", {}, True),
    ("half-inputs-fp32", _HALF_IN, "kbench", "fp32", {}, True),
    ("masked-kernelbench-fp64", _MASKED, "kernelbench", "fp32", {"judge": "fp64-bound"}, True),
    ("small-elementwise", _ELEMENTWISE, "kbench", "fp32", {}, False),
    ("small-gather", _GATHER, "kbench", "fp32", {}, False),
    ("small-half-inputs-fp16", _HALF_IN, "kbench", "fp16", {}, False),
    ("small-masked-kernelbench-fp64", _MASKED, "kernelbench", "fp32", {"judge": "fp64-bound"}, False),
]


@pytest.mark.parametrize("code,protocol,precision,overrides,large", [j[1:] for j in _JUDGED],
                         ids=[j[0] for j in _JUDGED])
def test_a_jobs_judging_holds_what_its_claim_counts(tmp_path, monkeypatch, code, protocol, precision, overrides, large):
    """Measured (live tensor bytes on the CPU, the allocator's allocated count on a GPU): a job's lazy judging
    against float64 (compare_on, as stored and after a timed round's refresh), up to the comparison itself, holds
    no more than the trusted side's term of its claim (work_nbytes with the context's sizes, less the candidate's
    process's part), and for a large elementwise float32 problem exactly 5 sets with the candidate's output: the
    float64 twin runs first on a copy of its own. With one copy of the set for both forwards it held 6 (H200
    session 17: 54 GiB in the allocator for L1/19). A smaller job keeps the one-copy path. Half precision (the
    twin's outputs four times the outputs; a refresh's float32 copy and buffer), half-precision inputs, integer
    inputs and a mask cast to floats under the kernelbench protocol were each counted short once (reviews)."""
    monkeypatch.setattr(ProblemContext, "large", property(lambda self: large))
    ctx = ProblemContext(Problem(1, 9919, "Large_test", code), get_protocol(protocol, precision, **overrides), 3,
                         torch.device("cpu"), tmp_path, ref_budget_bytes=0)
    assert ctx.lazy_refs and ctx.fp64_judge
    s, o = ctx.set_nbytes, ctx.out_nbytes
    # the forwards' temporaries beyond their outputs, measured here as the context measures them on a GPU
    ctx.ref_temp_bytes = _forward_temps(ctx.model, device_mod._cast_set(ctx.set_values(0), ctx.dtype, ctx.cast_all))
    ctx.ref64_temp_bytes = _forward_temps(ctx._m64, device_mod._upcast(ctx.set_values(0), ctx.device))
    # the formula's large branch for this small set, or its smaller one
    monkeypatch.setattr(device_mod, "LARGE_SET_BYTES", 1 if large else 1 << 40)
    work = DeviceEvaluator.work_nbytes(s, o, True, own_copies=0, **DeviceEvaluator.judging_sizes(ctx))
    # the trusted side's part: a large job's less the candidate's timing buffer counted beside it; a smaller
    # one's less the candidate's process (the clone and pristine copy, its output and the poisoned block)
    judging = work - s if large else work - (2 * s + 2 * o + ctx.ref_temp_bytes)
    seen = []
    monkeypatch.setattr(ctx, "_judged", lambda outs_, ref, ref64: seen.append(ref64[0].dtype) or True)
    for round_ in (None, 3):
        vals = device_mod._cast_set(ctx.set_values(0), ctx.dtype, ctx.cast_all)
        if round_ is not None:
            vals = [device_mod._timing.refresh_values(v, round_, key=ctx.refresh_key) if v.is_floating_point() else v
                    for v in vals]
        outs = [ctx.model(*vals).detach().clone()]  # the candidate's output, copied out
        del vals
        with _LiveBytes() as live:
            ctx.compare_on(0, round_, outs)
        held = live.peak + o  # with the candidate's output, allocated before
        assert held <= judging, (round_, held / s, judging / s)
        if code is _ELEMENTWISE and precision == "fp32" and large:
            assert held == 5 * s == judging, (round_, held / s)
    assert seen == [torch.float64, torch.float64]
    ctx.free()


def _forward_temps(model, args) -> int:
    """The most bytes ``model(*args)`` held beyond its outputs (live tensor storage)."""
    with torch.no_grad(), _LiveBytes() as live:
        out = model(*args)
    return max(0, live.peak - sum(t.untyped_storage().nbytes() for t in [out] if isinstance(t, torch.Tensor)))


def test_a_twin_built_anew_that_computes_something_else_is_dropped(tmp_path):
    """Built anew, only the weights and buffers are the reference's: a constant its __init__ draws from numpy is
    drawn again, and the twin would set the judge's bound from a different computation. It is checked against
    the reference and dropped (judged with allclose)."""
    src = CLOSURE.replace("self.register_buffer(", "import numpy as np\n        self.s = float(np.random.rand()) * 10\n"
                          "        self.register_buffer(").replace("return self.mlpf(x) + self.shift",
                                                                  "return self.mlpf(x) * self.s + self.shift")
    ctx = ProblemContext(Problem(3, 9945, "Drawn_test", src), get_protocol("kbench"), 3, torch.device("cpu"),
                         tmp_path)
    assert not ctx.fp64_judge and "no-fp64-reference" in ctx.flags and ctx.refs64 is None, ctx.flags


_L3_44 = Path(os.environ.get("KBENCH_SHARED", Path(__file__).resolve().parents[2].parent / "shared")) \
    / "kernelbench" / "level3" / "44_MiniGPTBlock.py"


@pytest.mark.skipif(not _L3_44.is_file(), reason="KernelBench main is not under KBENCH_SHARED")
def test_kernelbench_l3_44_has_a_float64_twin(tmp_path):
    """L3/44 itself (its sizes shrunk): before, its twin failed ("mat1 and mat2 must have the same dtype") and it
    was judged with allclose."""
    src = _L3_44.read_text()
    for k, v in {"batch_size": 2, "max_seqlen": 64, "seq_len": 32, "n_embd": 64}.items():
        src, n = re.subn(rf"^{k} = \d+", f"{k} = {v}", src, flags=re.M)
        assert n == 1, k
    ctx = ProblemContext(Problem(3, 44, "MiniGPTBlock", src), get_protocol("kbench"), 3, torch.device("cpu"),
                         tmp_path)
    assert ctx.fp64_judge and "no-fp64-reference" not in ctx.flags and len(ctx.refs64) == ctx.n_correct + 1
