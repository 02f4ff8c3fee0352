"""Where the reference model and the candidate's ``ModelNew`` are built (``Protocol.weights_device``).

PyTorch draws a model's weights on the host in one thread: KernelBench's L3/2 (2.1 billion weights) took
about 25 s to set up and its candidate about 20 s to construct on an H200's host, on the critical path of a
sweep. The ``kbench`` protocol builds both inside ``torch.device(<GPU>)``; KernelBench's and CUDA Agent's
protocols keep the host's build. No GPU here: a ``meta`` device stands in for it (a tensor made there proves
where the build ran), and the host copy is checked on CPU tensors.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch

from kernelbench_harness.core import Problem
from kernelbench_harness.errors import ConfigError
from kernelbench_harness.execution.device import ProblemContext, host_module_copy
from kernelbench_harness.protocols import Protocol, get_protocol

from .test_memory_accounting import CLOSURE as _CLOSURE

MLP = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.a = nn.Linear(sizes[0], sizes[1])
        self.b = nn.Linear(sizes[1], sizes[0])
        sizes.append(-1)  # a reference that changes its argument: the host's build after a failed one must not see it

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))

def get_inputs():
    return [torch.rand(2, 8)]

def get_init_inputs():
    return [[8, 16]]
"""


def _module(src: str) -> types.ModuleType:
    mod = types.ModuleType("problem")
    exec(src, mod.__dict__)
    return mod


def _ctx_like(seed: int = 7) -> types.SimpleNamespace:
    return types.SimpleNamespace(weights_seed=seed, problem=types.SimpleNamespace(key="L9/1"))


def test_kbench_builds_on_the_device_the_reproductions_on_the_host_and_old_stores_on_the_host() -> None:
    assert get_protocol("kbench").weights_device == "device"
    assert get_protocol("kernelbench").weights_device == "cpu" and get_protocol("cuda-agent").weights_device == "cpu"
    old = get_protocol("kbench").to_dict()
    del old["weights_device"]
    back = Protocol.from_dict(old)
    assert back.weights_device == "cpu"  # a run stored before the setting keeps building on the host on resume
    assert back.fingerprint() != get_protocol("kbench").fingerprint()
    # the reproductions keep the keys their stored runs have
    for name in ("kernelbench", "cuda-agent"):
        d = get_protocol(name).to_dict()
        del d["weights_device"]
        assert Protocol.from_dict(d).fingerprint() == get_protocol(name).fingerprint()
    # where the weights are drawn does not change a baseline's key: stored baselines stay usable
    assert get_protocol("kbench", weights_device="cpu").timing_fingerprint() == get_protocol("kbench").timing_fingerprint()
    with pytest.raises(ConfigError, match="weights_device"):
        get_protocol("kbench", weights_device="gpu")


def test_the_device_build_runs_inside_the_device_under_the_weights_seed_on_a_copy_of_the_arguments() -> None:
    mod = _module(MLP)
    init = list(mod.get_init_inputs())
    model = ProblemContext._model_on_device(_ctx_like(), mod, init, torch.device("meta"))
    assert model is not None
    assert {p.device.type for p in model.parameters()} == {"meta"}
    assert init == [[8, 16]]  # the build changed its own copy
    # the same seed on the host's stand-in device draws what the host's build draws
    on_cpu = ProblemContext._model_on_device(_ctx_like(), mod, list(mod.get_init_inputs()), torch.device("cpu"))
    torch.manual_seed(7)
    host = mod.Model([8, 16])
    assert all(torch.equal(a, b) for a, b in zip(on_cpu.state_dict().values(), host.state_dict().values()))


def test_a_reference_that_cannot_be_built_on_the_device_is_left_to_the_hosts_build() -> None:
    src = MLP.replace("sizes.append(-1)", "self.k = int(torch.randn(1).abs().ceil().item())")  # .item() fails on meta
    mod = _module(src)
    assert ProblemContext._model_on_device(_ctx_like(), mod, [[8, 16]], torch.device("meta")) is None


def test_the_host_copy_keeps_parameters_ties_and_buffers_in_new_memory() -> None:
    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)
            self.out = torch.nn.Linear(4, 10, bias=False)
            self.out.weight = self.emb.weight  # one parameter in two submodules
            self.frozen = torch.nn.Parameter(torch.ones(3), requires_grad=False)
            self.register_buffer("running", torch.arange(5.0))

    m = Tied()
    c = host_module_copy(m)
    assert c.out.weight is c.emb.weight  # still tied: one parameter
    assert isinstance(c.frozen, torch.nn.Parameter) and not c.frozen.requires_grad
    assert isinstance(c.emb.weight, torch.nn.Parameter) and c.emb.weight.requires_grad
    for (n1, a), (n2, b) in zip(m.state_dict().items(), c.state_dict().items()):
        assert n1 == n2 and torch.equal(a, b) and a.data_ptr() != b.data_ptr()
    with torch.no_grad():
        c.running.add_(1)
    assert torch.equal(m.running, torch.arange(5.0))  # the copy is the copy's


def test_on_a_cpu_device_the_weights_are_drawn_on_the_host_and_the_candidate_is_told_so(tmp_path: Path) -> None:
    problem = Problem(3, 9911, "MLP_test", MLP)
    ctx = ProblemContext(problem, get_protocol("kbench"), 3, torch.device("cpu"), tmp_path)
    try:
        assert ctx.weights_drawn_on == "cpu"
        assert ctx.job_fields()["weights_device"] == "cpu"
        assert ctx.reference_info()["weights_drawn_on"] == "cpu"
    finally:
        ctx.free()


def test_the_weights_files_for_the_candidate_are_written_with_the_hold_given_up(tmp_path: Path, monkeypatch) -> None:
    """Writing the weights' files is host work (seconds for L3/2's 8.6 GB): another slot's timing window need not
    wait for it."""
    import contextlib

    import kernelbench_harness.execution.device as dev

    off: list[bool] = []

    @contextlib.contextmanager
    def stretch():
        off.append(True)
        try:
            yield
        finally:
            off.pop()

    seen: list[bool] = []
    real = dev.write_tensor

    def spy(t, path):
        if Path(path).name.startswith("w_"):
            seen.append(bool(off))
        return real(t, path)

    monkeypatch.setattr(dev, "write_tensor", spy)
    ctx = ProblemContext(Problem(3, 9912, "MLP_test", MLP), get_protocol("kbench"), 3, torch.device("cpu"), tmp_path,
                         host_stretch=stretch)
    try:
        assert len(seen) == 4 and all(seen)  # two Linear layers: two weights, two biases
    finally:
        ctx.free()


# -- the device path with its gate opened on the CPU (torch.device("cpu") stands in for the GPU) -------------

# test_memory_accounting's L3/44 kind (a lambda closing over its MLP defeats a deep copy), with L3/33's kind added:
# a tensor held as a plain attribute
CLOSURE = _CLOSURE.replace(
    "        self.register_buffer(\"shift\", torch.full((n,), 0.5), persistent=False)",
    "        self.register_buffer(\"shift\", torch.full((n,), 0.5), persistent=False)\n        self.hidden = torch.randn(n)",
).replace("return self.mlpf(x) + self.shift", "return self.mlpf(x) + self.shift + self.hidden")
assert "self.hidden" in CLOSURE and "+ self.hidden" in CLOSURE


def test_the_device_path_tells_the_candidate_keeps_a_separate_host_copy_and_a_float64_twin(tmp_path: Path,
                                                                                         monkeypatch) -> None:
    import kernelbench_harness.execution.device as dev

    copies: list[int] = []
    real = dev.host_module_copy
    monkeypatch.setattr(dev, "weights_on_device", lambda protocol, device: True)
    monkeypatch.setattr(dev, "host_module_copy", lambda m: copies.append(1) or real(m))
    ctx = ProblemContext(Problem(3, 9913, "Closure_test", CLOSURE), get_protocol("kbench"), 3, torch.device("cpu"),
                         tmp_path)
    try:
        assert ctx.weights_drawn_on == "device" and ctx.job_fields()["weights_device"] == "device"
        assert copies == [1]
        for (n, a), b in zip(ctx.model.state_dict().items(), ctx.model_cpu.state_dict().values()):
            assert torch.equal(a, b) and a.data_ptr() != b.data_ptr(), n  # the host copy is its own memory
        assert ctx.model_cpu.hidden.data_ptr() != ctx.model.hidden.data_ptr()
        # the twin built anew (the lambda defeats a deep copy) was built where the reference was and agreed with it
        assert ctx.fp64_judge and "no-fp64-reference" not in ctx.flags, ctx.flags
        assert torch.equal(ctx._m64.hidden, ctx.model.hidden)
    finally:
        ctx.free()


def test_the_candidate_gets_the_init_inputs_get_init_inputs_returned_even_from_a_reference_that_changes_them(
        tmp_path: Path) -> None:
    from kernelbench_harness.execution.tensorio import decode_value

    ctx = ProblemContext(Problem(3, 9914, "MLP_test", MLP), get_protocol("kbench"), 3, torch.device("cpu"), tmp_path)
    try:
        assert decode_value(ctx.job_fields()["init_inputs"], ctx.inputs_dir) == [[8, 16]]
    finally:
        ctx.free()


def test_the_host_copy_copies_tensors_held_in_plain_attributes_lists_and_dicts(monkeypatch) -> None:
    class Holder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.h0 = torch.ones(3)
            self.states = [torch.zeros(2), 5]
            self.table = {"a": torch.arange(4.0)}

    m = Holder()
    # each was copied to the host by .to("cpu", copy=True), not deep-copied where it was (on a GPU: a device copy)
    moved: list[int] = []
    real_to = torch.Tensor.to

    def to(self, *a, **k):
        if a[:1] == ("cpu",) and k.get("copy"):
            moved.append(self.data_ptr())
        return real_to(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "to", to)
    c = host_module_copy(m)
    monkeypatch.undo()
    for a, b in ((m.h0, c.h0), (m.states[0], c.states[0]), (m.table["a"], c.table["a"])):
        assert a.data_ptr() in moved and torch.equal(a, b) and a.data_ptr() != b.data_ptr()
    assert c.states[1] == 5


# -- the candidate's side (worker.build_model_new) ------------------------------------------------------------

CANDIDATE = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n, mode="ok"):
        super().__init__()
        self.lin = nn.Linear(n, n)
        if torch.empty(0).device.type == "meta":
            if mode == "host-only":
                torch.randn(8, device="cpu")  # draws from the host's generator before it fails
                int(torch.randn(1).item())  # fails on meta
            elif mode == "oom":
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 GiB")
"""


def test_the_candidate_is_built_inside_the_device_it_is_told() -> None:
    from kernelbench_harness.execution.worker import build_model_new

    mod = _module(CANDIDATE)
    model, where, err = build_model_new(mod, lambda: [4], 7, torch.device("meta"))
    assert where == "device" and err is None and model.lin.weight.device.type == "meta"
    model, where, err = build_model_new(mod, lambda: [4], 7, None)
    torch.manual_seed(7)
    assert where == "cpu" and torch.equal(model.lin.weight, torch.nn.Linear(4, 4).weight)


def test_a_candidate_that_fails_on_the_device_is_built_on_the_host_from_fresh_init_inputs() -> None:
    from kernelbench_harness.execution.worker import build_model_new

    calls: list[int] = []

    def init() -> list:
        calls.append(1)
        return [4, "host-only"]

    model, where, err = build_model_new(_module(CANDIDATE), init, 7, torch.device("meta"))
    assert where == "cpu" and model.lin.weight.device.type == "cpu" and err  # the device's error is kept
    assert len(calls) == 2
    torch.manual_seed(7)
    assert torch.equal(model.lin.weight, torch.nn.Linear(4, 4).weight)  # reseeded before the host's build


def test_a_candidate_out_of_device_memory_is_not_built_again_on_the_host() -> None:
    from kernelbench_harness.execution.worker import build_model_new

    with pytest.raises(torch.OutOfMemoryError):
        build_model_new(_module(CANDIDATE), lambda: [4, "oom"], 7, torch.device("meta"))


def test_the_float64_twin_is_moved_and_cast_tensor_by_tensor_into_a_copy_that_keeps_ties_and_leaves_the_host_copy(
        tmp_path: Path) -> None:
    """ProblemContext._model64 (a copy, not built anew): the host copy's parameters and buffers are cast to float64
    one at a time (module_copy), ties kept, integer buffers kept as they are, tensors held as plain attributes left
    as Module._apply leaves them, and the host copy itself unchanged (float32, same memory)."""
    from kernelbench_harness.execution.device import module_copy

    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)
            self.out = torch.nn.Linear(4, 10, bias=False)
            self.out.weight = self.emb.weight
            self.register_buffer("steps", torch.arange(3))
            self.hidden = torch.ones(2)  # a plain attribute (L3/33's kind)

    m = Tied()
    ptr = m.emb.weight.data_ptr()
    moved: list[torch.dtype] = []

    def move(t: torch.Tensor) -> torch.Tensor:
        moved.append(t.dtype)
        return t.to(torch.float64) if t.is_floating_point() else t.clone()

    c = module_copy(m, move)
    assert c.out.weight is c.emb.weight and isinstance(c.emb.weight, torch.nn.Parameter)
    assert c.emb.weight.dtype == torch.float64 and c.steps.dtype == torch.int64
    assert sorted(map(str, moved)) == ["torch.float32", "torch.int64"]  # once per tensor: the tie moved once
    assert c.hidden.dtype == torch.float32 and c.hidden is not m.hidden  # deep-copied as it is
    assert m.emb.weight.dtype == torch.float32 and m.emb.weight.data_ptr() == ptr
    assert torch.equal(c.emb.weight, m.emb.weight.double())

    bn = MLP.replace("        self.b = nn.Linear(sizes[1], sizes[0])\n",
                     "        self.b = nn.Linear(sizes[1], sizes[0])\n        self.bn = nn.BatchNorm1d(sizes[1])\n")
    problem = Problem(3, 9912, "MLP_test", bn)
    ctx = ProblemContext(problem, get_protocol("kbench"), 3, torch.device("cpu"), tmp_path)
    try:
        twin = ctx._model64()
        for (n1, a), (n2, b) in zip(ctx.model_cpu.state_dict().items(), twin.state_dict().items()):
            assert n1 == n2 and torch.equal(a.double() if a.is_floating_point() else a, b)
            assert b.dtype == (torch.float64 if a.is_floating_point() else a.dtype)
            assert a.data_ptr() != b.data_ptr()  # never the host copy's own tensor (an integer buffer on this device)
        with torch.no_grad():
            twin.bn.train()(torch.ones(4, 16, dtype=torch.float64))
        assert int(ctx.model_cpu.bn.num_batches_tracked) == 0  # what the twin counts is the twin's
    finally:
        ctx.free()


def test_an_incorrect_verdict_says_when_modelnew_was_built_on_the_host_after_its_device_build_failed() -> None:
    import dataclasses

    from kernelbench_harness.execution.device import _host_build_hint

    kb = get_protocol("kbench")
    reseed = dataclasses.replace(kb, weights="reseed")
    failed = {"transferred": 4, "n_skipped": 0, "built_on": "cpu", "device_build_error": "RuntimeError: no cuda here"}
    assert _host_build_hint({**failed}, kb) == ""  # every weight carried: the host's draws changed nothing
    hint = _host_build_hint({**failed, "n_skipped": 2}, kb)
    assert "the 2 weight(s) the state_dict did not carry" in hint and "no cuda here" in hint
    assert "-P weights_device=cpu" in hint
    assert "every weight" in _host_build_hint(failed, reseed)
    assert _host_build_hint({"transferred": 4, "built_on": "device"}, reseed) == ""
    assert _host_build_hint(None, kb) == ""
