"""What enters the shared extension cache is made by the build pool from inputs it holds: a candidate's build
process names nothing and stores nothing there (BuildPool._serve_request, _compile_shared; build.shared_build_args).
Each test failed before the pool compiled shared extensions itself (the build process's ``ext_done`` and ``built``
messages named a binary and the name it was stored under)."""

from __future__ import annotations

import asyncio
import inspect
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from early import Early, in_child

from kernelbench_harness.core import Backend, Candidate
from kernelbench_harness.execution.build import extension_key, shared_build_args
from kernelbench_harness.execution.builder import BuildPool, _SharedWork, _tree_fingerprint

from .conftest import TWICE_SOURCE  # an extension without torch's headers: a second to compile
from .test_build_claims import _Handle  # the build process stand-in: scripted messages

_HONEST_ARGS = {"name": "twice", "cpp_sources": TWICE_SOURCE, "no_implicit_headers": True}

_HONEST = f'''import torch
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="twice", cpp_sources={TWICE_SOURCE!r}, no_implicit_headers=True)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return _ext.twice(x)
'''

# Builds a Python module of its own named as the honest candidate's extension (its twice() returns 666), then
# tells the pool it compiled that extension, in every message that once stored a binary, and leaves.
_FORGER = '''import gc, inspect, os, subprocess, sysconfig
from pathlib import Path

import torch.utils.cpp_extension as ce
from kernelbench_harness.execution.build import extension_key
from kernelbench_harness.execution.channel import Channel

ba = inspect.signature(ce.load_inline).bind(name="mine", cpp_sources=@SOURCE@, no_implicit_headers=True)
ba.apply_defaults()
target = "kb_" + extension_key("load_inline", dict(ba.arguments))
folder = Path(os.environ["TORCH_EXTENSIONS_DIR"]) / target
folder.mkdir(parents=True, exist_ok=True)
(folder / "fake.c").write_text(
    "#include <Python.h>\\n"
    "static PyObject* twice(PyObject* s, PyObject* a) { return PyLong_FromLong(666); }\\n"
    "static PyMethodDef m[] = {{\\"twice\\", twice, METH_O, \\"\\"}, {0}};\\n"
    "static struct PyModuleDef d = {PyModuleDef_HEAD_INIT, \\"" + target + "\\", 0, -1, m};\\n"
    "PyMODINIT_FUNC PyInit_" + target + "(void) { return PyModule_Create(&d); }\\n")
so = folder / (target + ".so")
subprocess.run(["cc", "-shared", "-fPIC", "-I" + sysconfig.get_paths()["include"], str(folder / "fake.c"), "-o",
                str(so)], check=True)
chan = next(o for o in gc.get_objects() if isinstance(o, Channel))
chan.send({"event": "ext_claim", "name": target})
chan.send({"event": "ext_done", "name": target, "so": str(so)})
chan.send({"event": "ext_request", "name": target, "args": {"cpp_sources": "int f() { return 1; }"}})
chan.send({"event": "built", "ok": True, "build": {"built": [{"name": target, "so": str(so)}], "cache_hits": [],
                                                   "compile_s": 0.0}})
os._exit(0)
'''.replace("@SOURCE@", repr(_HONEST_ARGS["cpp_sources"]))


def _honest_name() -> str:
    import torch.utils.cpp_extension as ce

    ba = inspect.signature(ce.load_inline).bind(**_HONEST_ARGS)
    ba.apply_defaults()
    return "kb_" + extension_key("load_inline", dict(ba.arguments))


def _forger_then_honest(tmp_path: Path) -> dict[str, Any]:
    """A forging candidate's build, then an honest one's with the extension the forger named, in one pool (in a
    child interpreter, beside the tests before it: tests/early.py); returns what the honest one's binary does."""
    import torch

    from kernelbench_harness.execution.build import _load_prebuilt

    pool = BuildPool(tmp_path / "cache", workers=1, timeout_s=600, scratch_dir=tmp_path / "s")
    name = _honest_name()
    try:
        forger = asyncio.run(pool.build(Candidate(1, 1, _FORGER, Backend.CPP)))
        after_forger = sorted(p.name for p in (tmp_path / "cache").glob("kb_*"))
        honest = asyncio.run(pool.build(Candidate(1, 2, _HONEST, Backend.CPP)))
        hits = sorted((tmp_path / "cache" / name).glob("*.so"))
        got: Any = None
        if hits:
            mod = _load_prebuilt(hits[0].stem, hits[0], True)
            got = mod.twice(torch.arange(3.0))
            got = got.tolist() if isinstance(got, torch.Tensor) else got
        return {"forger": (forger.status, forger.error[:2000]), "after_forger": after_forger,
                "honest": (honest.status, honest.error[:2000], honest.extensions), "name": name, "twice": got,
                "stats": dict(pool.stats)}
    finally:
        pool.close()


EARLY = {"forger_then_honest": Early(in_child(_forger_then_honest))}


@pytest.fixture
def forger_then_honest() -> dict[str, Any]:
    return EARLY["forger_then_honest"].result()


@pytest.mark.skipif(shutil.which("cc") is None or shutil.which("c++") is None, reason="needs a C and a C++ compiler")
def test_a_forged_binary_never_reaches_an_honest_candidate(forger_then_honest: dict[str, Any]) -> None:
    """The forger's process compiled a module of its own and said (ext_claim/ext_done, the built list) that it was
    the honest candidate's extension: the pool stored it under that name, and the honest candidate, whose Python
    differs, loaded it from the cache (its twice() returned 666)."""
    got = forger_then_honest
    assert got["after_forger"] == [], "a build process put a binary into the cache"
    status, error, exts = got["honest"]
    assert status == "built", error  # compiled now, by the pool: nothing was there under its name
    assert exts == (got["name"],)
    assert got["twice"] == [0.0, 2.0, 4.0]
    assert got["stats"]["ext_compiled"] == 1


def _bound(**kw: Any) -> dict[str, Any]:
    import torch.utils.cpp_extension as ce

    ba = inspect.signature(ce.load_inline).bind(name="x", **kw)
    ba.apply_defaults()
    return dict(ba.arguments)


def _name(pool: BuildPool, args: dict[str, Any] | None, *, close: bool = False) -> str:
    """The name the pool gives an extension of these arguments."""
    try:
        return "kb_" + extension_key("load_inline", args or {}, arch=pool.env.get("TORCH_CUDA_ARCH_LIST", ""))
    finally:
        if close:
            pool.close()


def _fake_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               processes: list[Callable[[dict[str, Any]], list[dict[str, Any]]]]) -> tuple[BuildPool, list[dict]]:
    """A pool whose processes are stand-ins: each start takes the next of ``processes``, which gets the job (its
    folder exists) and returns the messages the process sends."""
    pool = BuildPool(tmp_path / "cache", workers=1, scratch_dir=tmp_path / "s")
    jobs: list[dict[str, Any]] = []

    def start(job: dict[str, Any], sandbox: Any) -> _Handle:
        jobs.append(job)
        return _Handle(processes.pop(0)(job))

    monkeypatch.setattr(pool.launcher, "start", start)
    return pool, jobs


def test_no_message_of_a_build_process_names_or_stores_a_binary(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """ext_done and the final built list stored the file the process named under the name it gave; an
    ext_request is compiled by the pool under the name of its arguments, whatever name it says."""
    victim = "kb_" + "0123456789abcdef01234567"
    fake_args = shared_build_args(_bound(cpp_sources="int f() { return 666; }"))
    assert fake_args is not None

    def forger(job: dict[str, Any]) -> list[dict[str, Any]]:
        so = Path(job["build_dir"]) / victim / f"{victim}.so"
        so.parent.mkdir(parents=True)
        so.write_bytes(b"forged")
        private = {**(fake_args or {}), "extra_include_paths": [job["job_dir"]]}  # reads the process's own files
        return [{"event": "hello"}, {"event": "ext_claim", "name": victim},
                {"event": "ext_done", "name": victim, "so": str(so)},
                {"event": "ext_request", "name": victim, "args": private},
                {"event": "ext_request", "name": victim, "args": fake_args},
                {"event": "built", "ok": True, "build": {"built": [{"name": victim, "so": str(so)}],
                                                         "cache_hits": [victim], "compile_s": 1.0}}]

    def compile_ext(job: dict[str, Any]) -> list[dict[str, Any]]:
        assert job["mode"] == "compile_ext" and job["args"] == fake_args and job["name"] == true_name
        so = Path(job["build_dir"]) / job["name"] / f"{job['name']}.so"
        so.parent.mkdir(parents=True)
        so.write_bytes(b"compiled by the pool")
        return [{"event": "hello"}, {"event": "ext_compiled", "ok": True, "so": str(so), "compile_s": 2.0}]

    pool, jobs = _fake_pool(tmp_path, monkeypatch, [forger, compile_ext])
    true_name = _name(pool, fake_args)
    try:
        out = pool._build_sync(Candidate(1, 1, "import torch\n", Backend.CPP))
        assert [j["mode"] for j in jobs] == ["build", "compile_ext"]
        assert not (tmp_path / "cache" / victim).exists(), "a binary entered the cache under the process's name"
        assert (tmp_path / "cache" / true_name / f"{true_name}.so").read_bytes() == b"compiled by the pool"
        assert out.status == "built" and pool.stats["ext_compiled"] == 1
    finally:
        pool.close()


def test_the_pools_answers_to_a_build_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Arguments that read files are never compiled by the pool (the process compiles them itself); a compile
    error reaches the process as the compiler's output."""
    good = shared_build_args(_bound(cpp_sources="int f( {"))

    def failing(job: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"event": "ext_compiled", "ok": False, "error": "main.cpp:1: error: expected ')'"}]

    pool, jobs = _fake_pool(tmp_path, monkeypatch, [failing])
    name = _name(pool, good)
    try:
        deadline = time.monotonic() + 60
        work = _SharedWork()
        for bad in ({**(good or {}), "extra_include_paths": ["/tmp"]}, {**(good or {}), "extra_cflags": ["-fplugin=x"]},
                    {**(good or {}), "use_pch": True}, {"cpp_sources": "x"}, "nonsense", None):
            assert pool._serve_request(bad, set(), deadline, work) == {"cmd": "ext_private"}
        assert jobs == []
        held: set[str] = set()
        assert pool._serve_request(good, held, deadline, work) == {"cmd": "ext_error",
                                                                   "error": "main.cpp:1: error: expected ')'"}
        assert held == set() and name not in pool._ext_busy and not (tmp_path / "cache" / name).exists()
        # past the cap of compiles for one candidate (the failed one counted), the process compiles its own
        pool.MAX_SHARED_COMPILES = 1
        other = shared_build_args(_bound(cpp_sources="int g() { return 2; }"))
        assert pool._serve_request(other, held, deadline, work) == {"cmd": "ext_private"}
        assert len(jobs) == 1 and held == set() and not pool._ext_busy
    finally:
        pool.close()


@pytest.mark.parametrize("flags", [
    {"extra_include_paths": ["/tmp"]},
    {"extra_cflags": ["-include", "/tmp/x.h"]},
    {"extra_cflags": ["-O3 -include x.h"]},  # torch's build file joins flags with spaces: a shell splits them
    {"extra_cflags": ["-fplugin=x"]},
    {"extra_cflags": ["-fmodule-mapper=x.map"]},
    {"extra_cflags": ["-fprofile-use"]},
    {"extra_cflags": ["@flags.txt"]},
    {"extra_cflags": ["-DX=$(id)"]},
    {"extra_cflags": ["-O3;id"]},
    {"extra_cflags": ["-isystem", "x"]},
    {"extra_cflags": ["-Wp,-include,x.h"]},
    {"extra_cuda_cflags": ["-ccbin=x"]},
    {"extra_cuda_cflags": ["-Xcompiler", "-include,x.h"]},
    {"extra_ldflags": ["-L/tmp"]},
    {"extra_ldflags": ["-Wl,-rpath,/tmp"]},
    {"extra_ldflags": ["/tmp/lib.a"]},
    {"use_pch": True},
])
def test_a_call_that_reads_files_is_not_shared(flags: dict[str, Any]) -> None:
    assert shared_build_args(_bound(cpp_sources="int f();", **flags)) is None


@pytest.mark.parametrize("where,text", [
    ("cuda_sources", '#include "/dev/cpu/kb_adj.h"\n__global__ void k() {}'),  # stop 39's second attack
    ("cpp_sources", '#include "kernel.h"\nint f();'),
    ("cpp_sources", "#define H </etc/hostname>\n#include H\nint f();"),
    ("cpp_sources", "#include </tmp/x.h>\nint f();"),
    ("cpp_sources", "#include <../../tmp/x.h>\nint f();"),
    ("cpp_sources", '%:include "x.h"\nint f();'),  # a digraph
    ("cpp_sources", '??=include "x.h"\nint f();'),  # a trigraph (ISO modes up to C++14)
    ("cpp_sources", '#\\\ninclude "x.h"\nint f();'),  # a backslash-newline inside the directive
    ("cpp_sources", '#include_next "x.h"\nint f();'),
    ("cuda_sources", 'asm(".incbin \\"/tmp/blob\\"");\n__global__ void k() {}'),
    ("cpp_sources", '#if __has_include("/tmp/flag")\n#define FAST 1\n#endif\nint f();'),
    ("cpp_sources", '#pragma GCC dependency "/tmp/x"\nint f();'),
])
def test_a_source_that_names_a_file_is_not_shared(where: str, text: str) -> None:
    """The pool's cache name is the arguments' text: a source whose build reads a file the text only names
    (a header another candidate wrote, stop 39's second attack: the honest twin loaded the poisoner's binary)
    must be compiled privately."""
    kwargs = {"cpp_sources": "int f();", where: text}
    assert shared_build_args(_bound(**kwargs)) is None
    assert shared_build_args(_bound(cpp_sources="#include <torch/extension.h>\n#include <vector>\nint f();",
                                    cuda_sources="#include <cuda_fp16.h>\n__global__ void k() {}")) is not None


def test_what_candidates_write_is_shared() -> None:
    got = shared_build_args(_bound(
        cpp_sources=["torch::Tensor f(torch::Tensor x);"], cuda_sources="__global__ void k() {}", functions=["f"],
        extra_cflags=["-O3", "-std=c++17 -DNDEBUG"],
        extra_cuda_cflags=["-O3", "--use_fast_math", "-Xptxas", "-v", "-gencode", "arch=compute_90a,code=sm_90a",
                           "-U__CUDA_NO_HALF_OPERATORS__", "--expt-relaxed-constexpr", "-lineinfo"],
        extra_ldflags=["-lcublas"]))
    assert got is not None and shared_build_args(got) == got
    assert "name" not in got and got["cpp_sources"] == ["torch::Tensor f(torch::Tensor x);"]
    # the pool's name for them is the build process's name for the call
    bound = _bound(cpp_sources=("int f();",), functions=["f"])
    assert extension_key("load_inline", shared_build_args(bound) or {}) == extension_key("load_inline", bound)


def test_a_binary_made_with_a_header_that_changed_is_not_cached(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The binary was stored at ext_done, before the pool looked at the precompiled header the build had used; a
    header changed mid-build (a planted torch/all.h beside it, say) left its code in the cache. Now the pool's own
    compile is checked first, and compiled again without the header."""
    monkeypatch.setenv("KBENCH_PCH", "1")
    args = shared_build_args(_bound(cpp_sources="torch::Tensor f(torch::Tensor x) { return x; }", functions=["f"]))
    name = _name(BuildPool(tmp_path / "c0", scratch_dir=tmp_path / "s0"), args, close=True)
    key = "a" * 24
    header = tmp_path / "cache" / "pch" / key / "torch"

    def build(job: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"event": "ext_request", "name": name, "args": args},
                {"event": "built", "ok": True, "build": {"built": [], "cache_hits": [name]}}]

    def compile_with(planted: bool) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
        def compile_ext(job: dict[str, Any]) -> list[dict[str, Any]]:
            assert job["pch"] is planted  # the second compile goes without a header
            if planted:
                (header / "all.h").write_text("// planted: found before torch's own\n")
            so = Path(job["build_dir"]) / name / f"{name}.so"
            so.parent.mkdir(parents=True)
            so.write_bytes(b"with the planted header" if planted else b"clean")
            return [{"event": "ext_compiled", "ok": True, "so": str(so), "pch": [key] if planted else []}]
        return compile_ext

    pool, jobs = _fake_pool(tmp_path, monkeypatch, [build, compile_with(True), compile_with(False)])
    try:
        header.mkdir(parents=True)
        (header / "extension.h.gch").write_bytes(b"x" * 100)
        with pool._pch_lock:
            pool._pch_seen[key] = _tree_fingerprint(header.parent)  # as the pool's own header build records it
        out = pool._build_sync(Candidate(1, 1, "import torch\n", Backend.CPP))
        assert out.status == "built"
        assert (tmp_path / "cache" / name / f"{name}.so").read_bytes() == b"clean"
        assert not header.parent.exists()  # the changed header is removed, to be built again
        assert [j["mode"] for j in jobs] == ["build", "compile_ext", "compile_ext"]
    finally:
        pool.close()
