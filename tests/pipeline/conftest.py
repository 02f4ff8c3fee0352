"""Shared helpers for runner tests: small bundled runs on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: Short timing for runs whose tests check the pipeline (builds, caches, resume, slots), not the times:
#: a few fixed trials instead of kbench's adaptive ones (up to seconds per callable on a CPU) and no
#: time-based warm-up. Correctness checks are untouched (same trials, same judge).
SHORT_TIMING = {"warmup": 1, "warmup_ms": 0.0, "trials": 3, "max_trials": 3, "adaptive": False}
#: the same as ``kbench run`` options
SHORT_TIMING_ARGS = [a for k, v in SHORT_TIMING.items() for a in ("-P", f"{k}={str(v).lower()}")]

#: a load_inline extension without torch's headers (``no_implicit_headers=True``): ``twice(x)`` is ``x + x``. It
#: compiles in about a second here, against some twenty for one that includes torch/extension.h; the module is
#: named by the build (the pool names shared extensions itself)
TWICE_SOURCE = r"""
#include <Python.h>
#define KB_CAT_(a, b) a##b
#define KB_CAT(a, b) KB_CAT_(a, b)
#define KB_STR_(a) #a
#define KB_STR(a) KB_STR_(a)
static PyObject* twice(PyObject*, PyObject* x) { return PyNumber_Add(x, x); }
static PyMethodDef methods[] = {{"twice", twice, METH_O, nullptr}, {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, KB_STR(TORCH_EXTENSION_NAME), nullptr, -1, methods};
PyMODINIT_FUNC KB_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module); }
"""


def kbench(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the ``kbench`` CLI as a user would (``python -m kernelbench_harness``)."""
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([sys.executable, "-m", "kernelbench_harness", *args], cwd=cwd, env=e, text=True,
                       capture_output=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"kbench {' '.join(args)} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "results").mkdir()
    return tmp_path
