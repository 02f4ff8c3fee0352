"""Precompiled ``torch/extension.h`` for the binding file of ``load_inline`` builds (issue 7: where
compile time goes). A build reports the header it lacked, the trusted pool builds it once, later builds
with the same flags use it, what they produce is the same binary byte for byte, and a header changed
behind the pool's back is caught."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from early import Early, in_child

from kernelbench_harness.core import Backend, Candidate
from kernelbench_harness.execution import build as build_mod
from kernelbench_harness.execution import builder as builder_mod
from kernelbench_harness.execution.build import (
    SLIM_MACRO,
    BuildRecord,
    _pch_request,
    binding_command,
    build_pch,
    install_build_hooks,
)
from kernelbench_harness.execution.builder import BuildPool

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


@pytest.fixture(autouse=True)
def _pch_on(monkeypatch):
    monkeypatch.setenv("KBENCH_PCH", "1")  # tests/conftest.py turns it off for everything else

_EXT = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="twice_ext", cpp_sources=["torch::Tensor twice(torch::Tensor x) {{ return x * {k}; }}"],
                  functions=["twice"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.twice(x)
'''


def test_binding_flags_are_torchs_own_without_the_extension_name() -> None:
    plain = binding_command({"cpp_sources": ["//"], "extra_cflags": [SLIM_MACRO]})
    fast = binding_command({"cpp_sources": ["//"], "extra_cflags": ["-O3", SLIM_MACRO]})
    assert plain is not None and fast is not None
    compiler, flags = plain
    assert compiler and "-DTORCH_API_INCLUDE_EXTENSION_H" in flags and SLIM_MACRO in flags
    assert not any(f.startswith("-DTORCH_EXTENSION_NAME") for f in flags)
    assert "-O3" not in flags and "-O3" in fast[1] and sorted(set(fast[1]) - {"-O3"}) == sorted(set(flags))


def _request(flags, include_paths=(), with_cuda=False):
    """A request as an honest build would report it: the true key of these flags."""
    bound = {"cpp_sources": ["//"], "extra_cflags": [str(f) for f in flags] + [SLIM_MACRO] if isinstance(flags, list)
             else flags, "extra_include_paths": list(include_paths)}
    req = _pch_request(bound) if isinstance(flags, list) else None
    return {"key": req[0] if req else "k", "with_cuda": with_cuda, "extra_cflags": flags,
            "extra_include_paths": list(include_paths)}


class _FakeCompiler:
    """Stands in for build.py's compiler start: records the command, compiles nothing, fails."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    class _Done:
        pid = 0

        def wait(self, timeout=None):
            return 1

        def poll(self):
            return 1

    def __call__(self, argv, **kw):
        self.commands.append(list(argv))
        return self._Done()


@pytest.mark.parametrize("flags,include_paths", [
    (["-fplugin=/tmp/evil.so"], []),
    (["@/etc/passwd"], []),
    (["-O3 -fplugin=/tmp/evil.so"], []),
    (["-O3\n-fplugin=/tmp/evil.so"], []),  # a newline inside a flag
    (["-O3", "-O3"], []),  # the same flag twice: another 0.6 GB for nothing
    (["-O3", "-w", "-Wall", "-DNDEBUG"], []),  # more flags than any real candidate set
    ([], ["/tmp"]),
    ("-O3", []),
])
def test_the_trusted_side_compiles_nothing_a_candidate_chose(tmp_path: Path, monkeypatch, flags, include_paths) -> None:
    fake = _FakeCompiler()
    monkeypatch.setattr(build_mod, "_start_compiler", fake)
    assert build_pch(tmp_path, _request(flags, include_paths)) is None
    assert fake.commands == [] and not (tmp_path / "pch").exists()


def test_a_whitelisted_request_with_its_true_key_reaches_the_compiler(tmp_path: Path, monkeypatch) -> None:
    fake = _FakeCompiler()
    monkeypatch.setattr(build_mod, "_start_compiler", fake)
    build_pch(tmp_path, _request([" -O3\n"]))  # torch strips each flag; so does the trusted side
    [argv] = fake.commands
    assert "-x" in argv and "c++-header" in argv and "-O3" in argv and SLIM_MACRO in argv
    assert not any("\n" in a or a.startswith(" ") for a in argv)
    wrong = dict(_request(["-O3"]), key="0" * 24)
    assert build_pch(tmp_path, wrong) is None and len(fake.commands) == 1


def test_each_try_gets_the_sources_as_written(tmp_path: Path, monkeypatch) -> None:
    """torch's load_inline inserts into the lists it gets; the as-written retry after a failed slim
    compile must not see the first try's insertions (it would define the module twice)."""
    import torch.utils.cpp_extension as ce

    calls: list[list[str]] = []

    def fake_load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None, **kw):
        calls.append(list(cpp_sources))
        cpp_sources.insert(0, "#include <torch/extension.h>")  # what torch does
        cpp_sources.append("PYBIND11_MODULE(...)")
        if len(calls) == 1:
            raise RuntimeError("the slim compile failed")
        return object()

    monkeypatch.setattr(ce, "load_inline", fake_load_inline)
    monkeypatch.setattr(ce, "load", lambda *a, **k: None)
    install_build_hooks(tmp_path / "b", None, BuildRecord())
    sources = ["int f() { return 1; }"]
    ce.load_inline(name="x", cpp_sources=sources, functions=["f"])
    assert calls == [["int f() { return 1; }"], ["int f() { return 1; }"]]
    assert sources == ["int f() { return 1; }"]  # the candidate's own list untouched


def test_a_header_changed_behind_the_pools_back_is_removed(tmp_path: Path) -> None:
    pool = BuildPool(tmp_path / "c", workers=1, scratch_dir=tmp_path / "s")
    try:
        folder = tmp_path / "c" / "pch" / ("a" * 24)
        (folder / "torch").mkdir(parents=True)
        (folder / "torch" / "extension.h.gch").write_bytes(b"x" * 100)
        assert pool._pch_intact(["a" * 24]) and pool._pch_intact(["a" * 24])
        (folder / "torch" / "all.h").write_text("// planted: found before torch's own\n")
        assert not pool._pch_intact(["a" * 24]) and not folder.exists()
        assert not pool._pch_intact(["../escape"])
    finally:
        pool.close()


def test_a_candidate_cannot_make_the_pool_build_many_headers(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(builder_mod, "build_pch", lambda *a, **k: None)
    pool = BuildPool(tmp_path / "c", workers=1, scratch_dir=tmp_path / "s")
    try:
        for i in range(10):
            pool._want_pch({"key": f"k{i}", "with_cuda": False, "extra_cflags": [], "extra_include_paths": []})
        pool._want_pch({"key": "bad", "with_cuda": False, "extra_cflags": ["-fplugin=x"], "extra_include_paths": []})
        pool.wait_pch(60)
        assert len(pool._pch_keys) == pool.max_pch == 4 and "bad" not in pool._pch_keys
    finally:
        pool.close()


def _start_header(folder: Path, stoppers: list) -> object:
    """Builds the header for the flags of _EXT's build into ``folder / "c"`` on a thread (as the pool would
    after the first build); returns the wait for the path build_pch gave."""
    request = _request([])
    procs: list = []
    early: dict = {}

    def make() -> None:
        early.update(path=build_pch(folder / "c", request, started=procs.append))

    maker = threading.Thread(target=make, daemon=True)
    maker.start()
    stoppers.append(lambda: [build_mod.kill_group(p) for p in procs])

    def wait() -> dict:
        maker.join()
        return {"request": request, **early}

    return wait


def _builds_beside_the_header(tmp_path: Path) -> dict:
    """The pool's two builds of the test below, with the header built beside the first (in a child
    interpreter, beside the tests before it: tests/early.py); returns what the test checks, in its order,
    up to the first step that went wrong."""
    os.environ["KBENCH_PCH"] = "1"  # as _pch_on does for the tests in this process
    cache = tmp_path / "c"
    source = _EXT.format(k=2)
    # The header for these flags is built beside the first build, outside its cache (as the pool would
    # after it; started with the first build, to save the test a minute). The pool's own job waits for
    # it, moves it into the cache as build_pch moves its own, and then finds it done.
    early_header = Early(_start_header)
    early_header.start()
    request = _request([])
    real = builder_mod.build_pch
    early: dict = {}

    def pool_build_pch(*a, **k):
        early.update(early_header.result())
        if early["path"] is not None:
            (cache / "pch").mkdir(parents=True, exist_ok=True)
            os.replace(early["path"], cache / "pch" / early["request"]["key"])
        return real(*a, **k)

    seen: dict = {"cache": cache, "request": request}
    builder_mod.build_pch = pool_build_pch  # this interpreter's own: it ends with the job
    pool = BuildPool(cache, workers=1, timeout_s=600, scratch_dir=tmp_path / "s")
    try:
        out = asyncio.run(pool.build(Candidate(1, 1, source, Backend.CUDA)))
        seen.update(first=(out.status, out.error), pch_used_first=pool.stats["pch_used"])
        if out.status != "built":
            return seen
        pool.wait_pch(600)
        seen.update(pch_keys=set(pool._pch_keys), early_key=early["request"]["key"], early_path=early["path"],
                    pch_built=pool.stats["pch_built"], pch_names=[p.name for p in (cache / "pch").iterdir()],
                    ext_dirs=list(cache.glob("kb_*")))
        if len(seen["ext_dirs"]) != 1:
            return seen
        [ext_dir] = seen["ext_dirs"]
        seen["sos"] = [so.read_bytes() for so in ext_dir.glob("*.so")]
        if len(seen["sos"]) != 1:
            return seen
        shutil.rmtree(ext_dir)  # so the same candidate compiles again, now with the header
        again = asyncio.run(pool.build(Candidate(1, 1, source, Backend.CUDA)))
        seen.update(again=(again.status, again.error), pch_used_again=pool.stats["pch_used"],
                    slim=pool.stats["slim"], sos_again=[so.read_bytes() for so in ext_dir.glob("*.so")])
        return seen
    finally:
        pool.close()
        early_header.stop()


# queued when the session is collected (tests/early.py): the header's ~45 s of one core and the builds pass
# beside the tests before this one
EARLY = {"builds_beside_the_header": Early(in_child(_builds_beside_the_header))}


@pytest.fixture
def builds_beside_the_header() -> dict:
    return EARLY["builds_beside_the_header"].result()


def test_header_built_once_then_used_and_the_binary_is_unchanged(builds_beside_the_header) -> None:
    seen = builds_beside_the_header
    cache, request, tmp_path = seen["cache"], seen["request"], EARLY["builds_beside_the_header"].folder
    status, error = seen["first"]
    assert status == "built", error
    assert seen["pch_used_first"] == 0
    # the sandboxed build asked for exactly the header the trusted side computed
    assert seen["pch_keys"] == {request["key"]} == {seen["early_key"]} and seen["early_path"] is not None
    assert seen["pch_built"] == 1 and seen["pch_names"] == [request["key"]]
    [_ext_dir] = seen["ext_dirs"]
    [without] = seen["sos"]
    status, error = seen["again"]
    assert status == "built", error
    assert seen["pch_used_again"] == 1 and seen["slim"] == 2
    [so2] = seen["sos_again"]
    assert so2 == without  # byte for byte: the parse was skipped, nothing else changed
    # and GCC does take it under the binding file's own flags: -H marks a valid precompiled header "!"
    compiler, flags = binding_command({"cpp_sources": ["//"], "extra_cflags": [SLIM_MACRO]})
    main = tmp_path / "main.cpp"
    main.write_text("#include <torch/extension.h>\nint f() { return 1; }\n")
    folder = cache / "pch" / request["key"]
    res = subprocess.run([*compiler, "-DTORCH_EXTENSION_NAME=kb_x", *flags, f"-I{folder}", "-H", "-fsyntax-only",
                          str(main)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stderr.splitlines()[0] == f"! {folder / 'torch' / 'extension.h.gch'}"
