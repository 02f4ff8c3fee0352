"""Where the trusted side draws input sets (``Protocol.input_device``).

Current KernelBench level 1 has 6.4 GB inputs (L1/20-22); drawing six such sets with the CPU's
generator made most of the 92-100 s reference set-up of each on an H200. The ``kbench`` protocol
draws them on the run's GPU; KernelBench's and CUDA Agent's protocols keep ``get_inputs()`` on the
CPU, as their harnesses do. These tests stand in a ``meta`` device for the GPU (no GPU here): a
tensor made there proves where ``get_inputs`` created it.
"""

from __future__ import annotations

import types

import pytest
import torch

from kernelbench_harness.errors import ConfigError
from kernelbench_harness.execution.device import draw_inputs
from kernelbench_harness.protocols import Protocol, get_protocol


def _module(src: str) -> types.ModuleType:
    mod = types.ModuleType("problem")
    exec(src, mod.__dict__)
    return mod


PLAIN = _module("""
import torch
def get_inputs():
    return [torch.randn(4, 5), torch.randint(0, 7, (3,)), 2.5]
""")

NUMPY = _module("""
import torch
def get_inputs():
    x = torch.randn(4, 5)
    return [torch.from_numpy(x.numpy() * 2)]   # fails where tensors cannot go to NumPy
""")


def test_a_device_draw_creates_the_tensors_on_that_device():
    vals, where = draw_inputs(PLAIN, 123, torch.device("meta"))
    assert where == "device"
    assert vals[0].device.type == "meta" and vals[1].device.type == "meta" and vals[1].dtype == torch.int64
    assert vals[2] == 2.5


def test_a_cpu_draw_is_get_inputs_under_the_seed():
    vals, where = draw_inputs(PLAIN, 123, None)
    torch.manual_seed(123)
    want = PLAIN.get_inputs()
    assert where == "cpu" and torch.equal(vals[0], want[0]) and torch.equal(vals[1], want[1])
    again, _ = draw_inputs(PLAIN, 123, None)
    assert torch.equal(again[0], vals[0])


def test_get_inputs_that_fails_on_the_device_is_drawn_on_the_cpu_with_the_same_seed():
    vals, where = draw_inputs(NUMPY, 7, torch.device("meta"))
    torch.manual_seed(7)
    want = NUMPY.get_inputs()
    assert where == "cpu" and vals[0].device.type == "cpu" and torch.equal(vals[0], want[0])


def test_get_inputs_that_fails_everywhere_is_the_problems_error():
    bad = _module("def get_inputs():\n    raise RuntimeError('broken problem')\n")
    from kernelbench_harness.execution.device import ReferenceError_

    with pytest.raises(ReferenceError_, match="broken problem"):
        draw_inputs(bad, 1, torch.device("meta"))


def test_kbench_draws_on_the_device_the_reproductions_on_the_cpu_and_old_stores_on_the_cpu():
    assert get_protocol("kbench").input_device == "device"
    assert get_protocol("kernelbench").input_device == "cpu" and get_protocol("cuda-agent").input_device == "cpu"
    old = get_protocol("kbench").to_dict()
    del old["input_device"]
    back = Protocol.from_dict(old)
    assert back.input_device == "cpu"  # a run stored before the setting keeps drawing on the CPU on resume
    assert back.fingerprint() != get_protocol("kbench").fingerprint()
    # where inputs are drawn does not change a baseline's key
    assert get_protocol("kbench", input_device="cpu").timing_fingerprint() == get_protocol("kbench").timing_fingerprint()
    with pytest.raises(ConfigError, match="input_device"):
        get_protocol("kbench", input_device="gpu0")
