"""Issue 2, what must be shown, item 3: each way a candidate fails is an outcome, and the run goes on.

Every candidate here is evaluated for the tiny ``AFFINE`` problem (``y = 2 x + 1``) by one CPU evaluator
(Triton under its interpreter, C++ through ``load_inline``). Each failing candidate still defines a
kernel, so the static "no custom kernel" check does not decide its verdict.
"""

from __future__ import annotations

import textwrap

import pytest

from execution.evalkit import describe, evaluate
from kernelbench_harness.core import Outcome
from kernelbench_harness.execution.device import DeviceEvaluator

_TRITON_HEAD = '''\
import os
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def affine_kernel(x_ptr, out_ptr, n, alpha, beta, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * alpha + beta, mask=mask)


def affine(x, alpha, beta):
    x = x.contiguous()
    out = torch.empty_like(x)
    affine_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), alpha, beta, BLOCK=1024)
    return out


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
'''


def triton_candidate(body: str) -> str:
    """The Triton affine candidate with ``body`` as ``forward``'s body."""
    return _TRITON_HEAD + textwrap.indent(textwrap.dedent(body).strip() + "\n", " " * 8)


TRITON_OK = triton_candidate("return affine(x, self.alpha, 1.0)")

# A thin C++ extension (Python's C API only, no torch headers, so it compiles in about a second).
_CPP_HEAD = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <Python.h>
#define KB_CAT2(a, b) a##b
#define KB_CAT(a, b) KB_CAT2(a, b)

static PyObject* affine(PyObject*, PyObject* args) {
    unsigned long long src, dst;
    long long n;
    double alpha;
    if (!PyArg_ParseTuple(args, "KKLd", &src, &dst, &n, &alpha)) return nullptr;
    const float* x = reinterpret_cast<const float*>(src);
    float* y = reinterpret_cast<float*>(dst);
    for (long long i = 0; i < n; ++i) y[i] = x[i] * static_cast<float>(alpha) + 1.0f%s
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"affine", affine, METH_VARARGS, nullptr}, {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "fast_op", nullptr, -1, methods};
PyMODINIT_FUNC KB_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module); }
"""

ext = load_inline(name="fast_op", cpp_sources=SOURCE, no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        ext.affine(x.data_ptr(), out.data_ptr(), x.numel(), self.alpha)
        return out
'''
CPP_OK = _CPP_HEAD % ";"
CPP_SYNTAX_ERROR = _CPP_HEAD % ""  # the statement's semicolon is missing


def _assert(res, outcome: Outcome) -> None:
    assert res.outcome is outcome, describe(res)


def test_correct_triton_candidate(evaluator: DeviceEvaluator) -> None:
    res = evaluate(evaluator, TRITON_OK)
    _assert(res, Outcome.CORRECT)
    assert res.compiled and res.correct
    assert res.max_abs_err is not None and res.max_abs_err < 1e-6  # fp32 rounding against float64
    assert res.extra["launches"]["triton_launches"] >= 5  # one launch per correctness trial at least
    assert res.candidate is not None and res.candidate.n >= 1
    assert res.speedup_eager is not None  # a correct candidate gets a speedup


def test_incorrect_triton_candidate(evaluator: DeviceEvaluator) -> None:
    res = evaluate(evaluator, triton_candidate("return affine(x, self.alpha, 1.001)"))
    _assert(res, Outcome.INCORRECT)
    assert res.compiled and not res.correct
    assert res.max_abs_err == pytest.approx(0.001, rel=1e-3)
    assert "outside the bound" in res.error
    assert res.candidate is None and res.speedup_eager is None  # never timed


def test_cpp_candidate_fails_to_compile(evaluator: DeviceEvaluator) -> None:
    res = evaluate(evaluator, CPP_SYNTAX_ERROR)
    _assert(res, Outcome.COMPILE_ERROR)
    assert not res.compiled
    assert "error: expected" in res.error  # the compiler's own message reaches the result


def test_cpp_candidate_builds_under_a_unique_name(evaluator: DeviceEvaluator) -> None:
    res = evaluate(evaluator, CPP_OK)
    _assert(res, Outcome.CORRECT)
    (built,) = res.extra["build"]["built"]
    assert built["name"].startswith("kb_") and "fast_op" not in built["name"]
    assert res.extra["launches"]["extension_calls"] >= 5


def test_candidate_that_raises(evaluator: DeviceEvaluator) -> None:
    res = evaluate(evaluator, triton_candidate('raise RuntimeError("boom: no kernel for this shape")'))
    _assert(res, Outcome.RUNTIME_ERROR)
    assert res.compiled
    assert "boom: no kernel for this shape" in res.error


def test_candidate_that_raises_at_import(evaluator: DeviceEvaluator) -> None:
    src = TRITON_OK.replace("class ModelNew", "raise ImportError('needs a GPU')\n\n\nclass ModelNew")
    res = evaluate(evaluator, src)
    _assert(res, Outcome.COMPILE_ERROR)  # the module never loaded: nothing was built
    assert "needs a GPU" in res.error


def test_hang_times_out_and_the_next_candidate_is_judged(evaluator: DeviceEvaluator) -> None:
    res = evaluate(evaluator, triton_candidate("while True:\n    pass"), timeout_s=2.0)
    _assert(res, Outcome.TIMEOUT)
    assert res.extra["phase"] == "run"
    assert "no answer within 2 s" in res.error
    _assert(evaluate(evaluator, TRITON_OK), Outcome.CORRECT)


@pytest.mark.parametrize("body, signal", [
    ("os.abort()", 6),
    ("import faulthandler\nfaulthandler._sigsegv()", 11),  # a read of an unmapped page
], ids=["abort", "segfault"])
def test_crash_is_a_runtime_error_and_the_next_candidate_is_judged(evaluator: DeviceEvaluator, body: str,
                                                                   signal: int) -> None:
    res = evaluate(evaluator, triton_candidate(body))
    _assert(res, Outcome.RUNTIME_ERROR)
    assert f"killed by signal {signal}" in res.error
    _assert(evaluate(evaluator, TRITON_OK), Outcome.CORRECT)
