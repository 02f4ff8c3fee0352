"""The static source checks (``guards.static_findings``): what they must flag, written many ways, and
what legitimate kernels look like, which they must not flag as cheating.

The runtime half of each defence is exercised end to end in ``tests/exploits``.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from kernelbench_harness.core import Severity
from kernelbench_harness.execution.guards import static_findings

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("KBENCH_SHARED", REPO.parent / "shared"))

# A legitimate Triton candidate around which the snippets below are placed.
_BASE = '''\
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.utils.cpp_extension import load_inline


@triton.autotune(configs=[triton.Config({"BLOCK": 1024})], key=["n"])
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * s, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer0 = nn.Linear(4, 4)

    def forward(self, x):
{body}
'''


def _src(body: str, head: str = "") -> str:
    return head + _BASE.replace("{body}", textwrap.indent(textwrap.dedent(body).strip(), " " * 8))


def _kinds(source: str, severity: Severity = Severity.CHEAT) -> set[str]:
    return {f.tag for f in static_findings(source) if f.severity is severity}


LEGITIMATE = {
    "an object's own namespace and eval mode": """
        state = dict(self.__dict__)
        self.layer0.eval()
        opt = torch.compile
        return x
    """,
    "math and streams": """
        stream = torch.cuda.current_stream()
        torch.cuda.synchronize()
        n = math.prod(x.shape)
        out = torch.empty_like(x)
        scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, 2.0)
        return out
    """,
    "module helpers": """
        for m in self.modules():
            pass
        layer = getattr(self, f"layer{0}")
        if x.dtype == torch.float16 or torch.backends.cudnn.benchmark:
            x = x.float()
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        return F.gelu(layer(x)) + y.zero_()
    """,
    "torch.compile of a helper": """
        helper = torch.compile(lambda t: t * 2.0)
        return helper(x)
    """,
    "ctypes on a tensor's own memory, id() as a cache key": """
        import ctypes
        view = (ctypes.c_float * x.numel()).from_address(x.contiguous().data_ptr())
        cache = {id(self): ctypes.c_float(2.0).value}
        lib = ctypes.CDLL(None)
        return x * cache[id(self)] + view[0] * 0
    """,
    "error handling, package checks and helpers of honest kernels (stop 40, helper-79's false alarms)": """
        import sys, traceback, importlib.util
        from torch.nn.modules.utils import _pair
        try:
            k = _pair(3)
        except Exception:
            traceback.print_exc()
            print(sys.exc_info()[1])
            raise
        if "_ext" not in globals() and importlib.util.find_spec("triton") is not None:
            torch.backends.cuda.matmul.allow_tf32 = False
        rec = torch.cuda.Event(enable_timing=True)
        rec.elapsed_time_ms = 0.0
        dtypes = {name: getattr(tl, name) for name in ("float32", "float64")}
        n = x.numel()
        out = torch.empty_like(x)
        scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, 2.0)
        return out if dtypes else x
    """,
    "pybind11 importing warnings": """
        src = 'void f() { py::module_::import("warnings").attr("warn")("slow path"); }'
        n = x.numel()
        out = torch.empty_like(x)
        scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, 2.0)
        return out
    """,
    "timing comparisons read, not replaced": """
        with torch.no_grad():
            ok = torch.allclose(x, x)
        t = torch.cuda.Event(enable_timing=True)
        return x if ok else x * 0
    """,
}

CPP_LEGITIMATE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void k(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }
torch::Tensor f(torch::Tensor x) {
    auto y = torch::empty_like(x);
    auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(x.scalar_type(), "f", [&] {});
    k<<<(x.numel() + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    cudaDeviceSynchronize();
    return y;
}
"""
ext = load_inline(name="copy_ext", cpp_sources="torch::Tensor f(torch::Tensor x);", cuda_sources=cuda_src,
                  functions=["f"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.f(x)
'''


@pytest.mark.parametrize("body", LEGITIMATE.values(), ids=LEGITIMATE.keys())
def test_legitimate_idioms_are_not_flagged(body: str) -> None:
    findings = [f for f in static_findings(_src(body)) if f.severity is not Severity.INFO and f.tag != "ctypes"]
    assert findings == [], findings


def test_legitimate_cuda_extension_is_not_flagged() -> None:
    findings = [f for f in static_findings(CPP_LEGITIMATE) if f.severity is not Severity.INFO]
    assert findings == [], findings


FLAGGED = [
    # (head, body, severity, tag)
    ("import time as clock\n", "clock.perf_counter = lambda: 0.0\nreturn x", Severity.CHEAT, "timer-tamper"),
    ("import torch.cuda as tc\n", "tc.Event.elapsed_time = lambda a, b: 0.0\nreturn x", Severity.CHEAT,
     "timer-tamper"),
    ("from torch import testing\n", "testing.assert_close = print\nreturn x", Severity.CHEAT, "timer-tamper"),
    ("", 'setattr(torch, "allclose", lambda *a, **k: True)\nreturn x', Severity.CHEAT, "timer-tamper"),
    ("import time\n", 'setattr(time, "perf_" + "counter", lambda: 0.0)\nreturn x', Severity.CHEAT, "timer-tamper"),
    ("", "torch.Tensor.__eq__ = lambda a, b: True\nreturn x", Severity.CHEAT, "timer-tamper"),
    ("from torch.backends import cudnn as dnn\n", "dnn.benchmark = True\nreturn x", Severity.CHEAT,
     "global-state"),
    ("", 'setattr(torch.backends.cuda.matmul, "allow_tf32", True)\nreturn x', Severity.CHEAT, "global-state"),
    ("import torch as T\n", 'T.set_float32_matmul_precision("high")\nreturn x', Severity.CHEAT, "global-state"),
    ("", "torch.backends.fp32_precision = 'tf32'\nreturn x", Severity.CHEAT, "global-state"),
    ("import _thread\n", "_thread.start_new_thread(print, ())\nreturn x", Severity.CHEAT, "deferred-work"),
    ("from concurrent import futures\n", "futures.ThreadPoolExecutor(1)\nreturn x", Severity.CHEAT,
     "deferred-work"),
    ("import signal\n", "signal.setitimer(signal.ITIMER_REAL, 0.01)\nreturn x", Severity.CHEAT, "deferred-work"),
    ("import os\n", "os.fork()\nreturn x", Severity.CHEAT, "deferred-work"),
    ("", 'L = type("L", (torch.Tensor,), {})\nreturn torch.Tensor._make_subclass(L, x)', Severity.CHEAT,
     "non-plain-tensor"),
    ("", "return x.as_subclass(nn.Parameter)", Severity.CHEAT, "non-plain-tensor"),
    ("import sys\n", 'm = getattr(sys, "mod" + "ules")\nreturn x', Severity.CHEAT, "introspection"),
    ("", 'return eval("x")', Severity.CHEAT, "introspection"),
    ("", "f = self.forward.__code__\nreturn x", Severity.CHEAT, "introspection"),
    ("", "mods = torch.sys.modules\nreturn x", Severity.CHEAT, "introspection"),
    ("", 'mods = getattr(torch.sys, "mod" + "ules")\nreturn x', Severity.CHEAT, "introspection"),
    ("import gc\n", "gc.get_objects()\nreturn x", Severity.CHEAT, "introspection"),
    ("import runpy\n", 'ref = runpy.run_path("../problem.py")["Model"]\nreturn x', Severity.CHEAT,
     "introspection"),
    ("", 'code = compile("y = 1", "f", "exec")\nreturn x', Severity.CHEAT, "introspection"),
    # stop 39/40 attacks: the harness reached by names the scan did not read, memory written through ctypes
    ("import os\n", 'm = getattr(os.sys, "modules")\nreturn x', Severity.CHEAT, "introspection"),
    ("import os, operator\n", 'm = operator.attrgetter("sys.modules")(os)\nreturn x', Severity.CHEAT,
     "introspection"),
    ("import os\n", 's = os.sys\nm = getattr(s, "".join(reversed("seludom")))\nreturn x', Severity.CHEAT,
     "introspection"),
    ("from torch.utils import cpp_extension as ce\n", 'w = ce.importlib.import_module(name)\nreturn x',
     Severity.CHEAT, "introspection"),
    ("", 'w = sorted(pkgs)["kernelbench" + "_harness.execution"]\nreturn x', Severity.CHEAT, "introspection"),
    ("import sys\n", 'fr = getattr(sys.exc_info()[2], "".join(map(chr, (116, 98, 95))) + "frame")\nreturn x',
     Severity.CHEAT, "introspection"),
    # stop 40, helper-79: getattr in a helper with a name spelled at run time, passed on as a value, or through
    # __getattribute__; sys.modules imported by name; a run-time import by another module's helper
    ("import os\n", "def g(o, k):\n    return getattr(o, k)\nm = g(os.sys, n)\nreturn x", Severity.CHEAT,
     "introspection"),
    ("import os, functools\n", 'm = functools.reduce(getattr, ("sys", "modules"), os)\nreturn x', Severity.CHEAT,
     "introspection"),
    ("import os\n", 'm = type(os).__getattribute__(os.sys, "modules")\nreturn x', Severity.CHEAT,
     "introspection"),
    ("import operator, os\n", 'm = operator.methodcaller("__getattribute__", "modules")(os.sys)\nreturn x',
     Severity.CHEAT, "introspection"),
    ("from sys import modules\n", "return x", Severity.CHEAT, "introspection"),
    ("", "w = torch._utils._import_dotted_name(name)\nreturn x", Severity.CHEAT, "introspection"),
    ("def v(o):\n    return vars(o)\n", "return x", Severity.CHEAT, "introspection"),
    ("import numpy as np, time\n", "C = np.ctypeslib.ctypes\na = id(time.perf_counter_ns)\n"
     "p = C.cast(a + 16, C.POINTER(C.c_void_p))\nreturn x", Severity.CHEAT, "introspection"),
    ("", "w._timing._perf_counter_ns = lambda: 0\nreturn x", Severity.CHEAT, "timer-tamper"),
    ("import ctypes, time\n", "p = ctypes.c_void_p.from_address(id(time.perf_counter_ns) + 16)\nreturn x",
     Severity.CHEAT, "introspection"),
    ("", "C = torch.ctypes\nP = C.POINTER(C.c_void_p)\nm = C.cast(id(x) + 16, P)\nreturn x", Severity.CHEAT,
     "introspection"),
    ("from ctypes import memmove\n", "memmove(a, b, 8)\nreturn x", Severity.CHEAT, "introspection"),
    ("", 'src = "void f() { auto t = py::module_::import(\\"time\\"); }"\nreturn x', Severity.CHEAT,
     "introspection"),
    ("", 'src = "void* f = dlsym(RTLD_DEFAULT, \\"clock_gettime\\"); mprotect(p, 4096, 3);"\nreturn x',
     Severity.CHEAT, "introspection"),
    # stop 41: modules the scan refuses to import, and the lookup builtins, reached through a library's namespace
    ("import triton.language as tl\n", 'B = tl.core.builtins\nB.exec(s)\nreturn x', Severity.CHEAT,
     "introspection"),
    ("import triton.language as tl\n", "m = tl.core\ng = m.builtins.getattr\nreturn x", Severity.CHEAT,
     "introspection"),
    ("import triton.language as tl\n", "s = tl.core.inspect.stack()\nreturn x", Severity.CHEAT, "introspection"),
    ("import triton.language as tl\n", 'B = tl.core.__dict__["built" + "ins"]\nreturn x', Severity.CHEAT,
     "introspection"),
    ("", "e = x.vars(torch)\nreturn x", Severity.CHEAT, "introspection"),
    ("", "m = torch.load(p, weights_only=False)\nreturn x", Severity.CHEAT, "introspection"),
    ("import numpy as np\n", "m = np.load(p, allow_pickle=True)\nreturn x", Severity.CHEAT, "introspection"),
    ("from types import FunctionType\n", "f = FunctionType(c, {})\nreturn x", Severity.CHEAT, "introspection"),
    ("import sys\n", "sys.meta_path.insert(0, f)\nreturn x", Severity.CHEAT, "introspection"),
    ("from unittest import mock\n", "mock.patch(n, f).start()\nreturn x", Severity.CHEAT, "introspection"),
    ("import logging.config\n", "o = logging.config.BaseConfigurator({}).resolve(n)\nreturn x", Severity.CHEAT,
     "introspection"),
    ("import typing\n", "h = typing.get_type_hints(f)\nreturn x", Severity.CHEAT, "introspection"),
    ("import string\n", "o = string.Formatter().get_field(n, (f,), {})\nreturn x", Severity.CHEAT,
     "introspection"),
    ("", 'd = g["sys"].__dict__\nreturn x', Severity.CHEAT, "introspection"),
    ("", "return x.half().float()", Severity.POLICY, "precision"),
    ("", "return x.to(dtype=torch.bfloat16).float()", Severity.POLICY, "precision"),
    ("", "return torch.empty(x.shape, dtype=torch.float16).float()", Severity.POLICY, "precision"),
    ("", "s = torch.cuda.Stream()\nreturn x", Severity.WARN, "side-stream"),
]


@pytest.mark.parametrize("head, body, severity, tag", FLAGGED, ids=[f"{t}-{i}" for i, (_, _, _, t) in
                                                                     enumerate(FLAGGED)])
def test_tricks_are_flagged_however_written(head: str, body: str, severity: Severity, tag: str) -> None:
    assert tag in _kinds(_src(body, head), severity), static_findings(_src(body, head))


def test_try_except_fallback_around_a_launch_is_marked() -> None:
    body = """
        try:
            out = torch.empty_like(x)
            scale_kernel[(1,)](x, out, x.numel(), 2.0)
            return out
        except Exception:
            return x * 2.0
    """
    findings = static_findings(_src(body))
    assert any(f.check == "static.fallback" and f.tag == "no-custom-kernel" for f in findings), findings
    reraise = body.replace("return x * 2.0", "raise")
    assert not any(f.check == "static.fallback" for f in static_findings(_src(reraise)))


def test_kernel_thread_in_extension_source_is_flagged() -> None:
    src = CPP_LEGITIMATE.replace("cudaDeviceSynchronize();", "std::thread([] {}).detach();")
    assert "deferred-work" in _kinds(src)


def test_reference_and_no_kernel() -> None:
    assert _kinds("import torch.nn as nn\nclass ModelNew(Model):\n    pass\n") == {"no-custom-kernel"}
    plain = "import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" \
            "        return torch.relu(x)\n"
    assert {f.check for f in static_findings(plain)} == {"static.no-kernel"}


def test_unparsable_source_is_left_to_the_build() -> None:
    (f,) = static_findings("def broken(:\n")
    assert f.check == "static.syntax" and f.severity is Severity.INFO


@pytest.mark.skipif(not (SHARED / "kernelsseum-v0" / "generations.jsonl").is_file(), reason="no shared data")
def test_no_false_alarms_on_published_candidates() -> None:
    """Every published kernelsseum-v0 candidate that contains a kernel passes the static checks; the only
    one flagged is L3/29 (gemini-1.5-flash), which imports load_inline but never builds a kernel."""
    flagged = []
    for line in (SHARED / "kernelsseum-v0" / "generations.jsonl").read_text().splitlines():
        row = json.loads(line)
        bad = [f for f in static_findings(row["code"]) if f.severity in (Severity.CHEAT, Severity.POLICY,
                                                                          Severity.TIMING)]
        if bad:
            flagged.append((row["level"], row["problem_id"], row["model"], sorted({f.check for f in bad})))
    assert flagged == [(3, 29, "gemini-1.5-flash", ["static.no-kernel"])]


def test_the_harness_reached_by_a_modules_identity_a_string_or_pkgutil_is_a_cheat_and_a_bare_relative_import_a_warning():
    """A candidate that sets its module's __package__ (at module level) and imports relatively reached the worker's
    job object (helper-56's attack A); pkgutil.resolve_name or pydoc.locate with the package's name in a string do the
    same (helper-58). A relative import alone fails in a one-file candidate, as an honest fallback may try; a class
    attribute named __name__ is no module's identity."""
    from kernelbench_harness.core import Severity
    from kernelbench_harness.execution.guards import static_findings

    def severities(src: str) -> dict[str, str]:
        return {f.message: f.severity.value for f in static_findings(textwrap.dedent(src))
                if f.tag == "introspection"}

    assert severities('__package__ = "x.y"\n')["sets __package__"] == Severity.CHEAT.value
    assert severities("if True:\n    __spec__ = None\n")["sets __spec__"] == Severity.CHEAT.value
    assert severities("class F:\n    __name__ = 'x'\n") == {}
    assert severities("try:\n    from .k import f\nexcept ImportError:\n    f = None\n") == \
        {"relative import from .k": Severity.WARN.value}
    assert severities("import pkgutil\n")["imports pkgutil"] == Severity.CHEAT.value
    assert severities("from pydoc import locate\n")["imports pydoc"] == Severity.CHEAT.value
    assert severities('j = "kernelbench_harness.execution.worker"\n')["names the harness's package"] == \
        Severity.CHEAT.value


@pytest.mark.parametrize("src", [
    "import torch\ndef f():\n    return torch.autograd._profiler_enabled()\n",
    "import torch\nflag = getattr(torch.autograd, '_profiler_enabled')\n",
    "from torch.autograd import _profiler_enabled\n",
    "from torch.autograd.profiler import _is_profiler_enabled as on\n",
    "import torch\nprof = torch.autograd.profiler._get_current_profiler\n",
    "import torch\nname = '_pro' + 'filer_enabled'\nflag = getattr(torch.autograd, name)\n",
])
def test_reading_the_profilers_state_is_introspection(src: str) -> None:
    """The custom-kernel share and the launch check are read from one profiled call: a candidate that can tell
    that call apart can act differently there (raise, burn time, return garbage)."""
    got = [f for f in static_findings(src) if f.check == "static.introspection"]
    assert got and all(f.severity is Severity.CHEAT for f in got)


def test_annotating_with_the_profiler_is_not_introspection() -> None:
    src = "import torch\ndef f(x):\n    with torch.profiler.record_function('mine'):\n        return x + 1\n"
    assert not [f for f in static_findings(src) if f.check == "static.introspection"]


def test_import_watch_refuses_python_the_scan_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's import watch: a module already on sys.path imports; one in the private folder, one in a folder
    put on sys.path later, one written after the watch started, and a package folder there are refused (each with
    a call of ``on_refuse``), and the watch knows when it was taken off ``sys.meta_path``."""
    import sys
    import time

    from kernelbench_harness.execution.guards import ImportWatch

    old, private, later = tmp_path / "old", tmp_path / "private", tmp_path / "later"
    for d in (old, private, later):
        d.mkdir()
    (old / "kbw_old.py").write_text("VALUE = 1\n")
    (private / "kbw_private.py").write_text("VALUE = 2\n")
    (later / "kbw_later.py").write_text("VALUE = 3\n")
    (later / "kbw_pkg").mkdir()
    monkeypatch.syspath_prepend(str(old))
    seen: list[tuple[str, str]] = []
    watch = ImportWatch([private], on_refuse=lambda name, origin, why: seen.append((name, why)))
    time.sleep(0.05)
    (old / "kbw_new.py").write_text("VALUE = 4\n")
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    watch.install()
    monkeypatch.syspath_prepend(str(private))
    monkeypatch.syspath_prepend(str(later))
    try:
        import kbw_old  # noqa: F401

        for name in ("kbw_private", "kbw_later", "kbw_new", "kbw_pkg"):
            with pytest.raises(ImportError, match="kbench refused to import " + name):
                __import__(name)
        assert watch.intact()
    finally:
        for name in ("kbw_old", "kbw_private", "kbw_later", "kbw_new", "kbw_pkg"):
            sys.modules.pop(name, None)
    assert [n for n, _ in seen] == ["kbw_private", "kbw_later", "kbw_new", "kbw_pkg"]
    assert [w for _, w in seen] == ["it lies in the candidate's own folder",
                                    "its folder was not on sys.path when the candidate started",
                                    "it was written while the candidate ran",
                                    "its folder was not on sys.path when the candidate started"]
    # a finder of the candidate's own put before the watch (its code in the private folder) breaks it; one of a
    # library's does not
    (private / "kbw_finder.py").write_text("class F:\n    def find_spec(self, *a):\n        return None\n")
    ns: dict = {}
    exec(compile((private / "kbw_finder.py").read_text(), str(private / "kbw_finder.py"), "exec"), ns)
    sys.meta_path.insert(0, ns["F"]())
    assert not watch.intact()
    library_find_spec = pytest.importorskip("_distutils_hack").DistutilsMetaFinder.find_spec
    sys.meta_path[0] = type("LibraryFinder", (), {"find_spec": library_find_spec})()
    assert watch.intact()
    sys.meta_path.remove(watch)
    assert not watch.intact()
