"""Precompiled ``torch/extension.h`` for the binding file of ``load_inline`` builds (issue 7: where
compile time goes). A build reports the header it lacked, the trusted pool builds it once, later builds
with the same flags use it, and what they produce is the same binary byte for byte."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from kernelbench_harness.core import Backend, Candidate
from kernelbench_harness.execution.build import SLIM_MACRO, binding_command, build_pch
from kernelbench_harness.execution.builder import BuildPool

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")

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


@pytest.mark.parametrize("request_", [
    {"key": "k", "with_cuda": False, "extra_cflags": ["-fplugin=/tmp/evil.so"], "extra_include_paths": []},
    {"key": "k", "with_cuda": False, "extra_cflags": ["@/etc/passwd"], "extra_include_paths": []},
    {"key": "k", "with_cuda": False, "extra_cflags": ["-O3 -fplugin=/tmp/evil.so"], "extra_include_paths": []},
    {"key": "k", "with_cuda": False, "extra_cflags": [], "extra_include_paths": ["/tmp"]},
    {"key": "k", "with_cuda": False, "extra_cflags": "-O3", "extra_include_paths": []},
    {"key": "not-the-key-of-these-flags", "with_cuda": False, "extra_cflags": ["-O3"], "extra_include_paths": []},
])
def test_the_trusted_side_compiles_nothing_a_candidate_chose(tmp_path: Path, request_: dict) -> None:
    assert build_pch(tmp_path, request_) is None
    assert not (tmp_path / "pch").exists()


def _so_files(cache: Path) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in cache.glob("kb_*/*.so")}


def test_header_built_once_then_used_and_the_binary_is_unchanged(tmp_path: Path) -> None:
    first_cache, second_cache = tmp_path / "c1", tmp_path / "c2"
    pool = BuildPool(first_cache, workers=1, timeout_s=600, scratch_dir=tmp_path / "s1")
    try:
        out = asyncio.run(pool.build(Candidate(1, 1, _EXT.format(k=2), Backend.CUDA)))
        assert out.status == "built", out.error
        assert pool.stats["pch_used"] == 0
        pool.wait_pch(600)  # the build asked for the header; the pool made it in the background
        assert pool.stats["pch_built"] == 1
        [pch] = list((first_cache / "pch").iterdir())
        assert (pch / "torch" / "extension.h.gch").stat().st_size > 1 << 20
        # the same build again (no binary cached yet in the second cache) uses it; the header's text
        # beside it is made to fail, so the slim compile succeeds only if GCC took the precompiled one
        shutil.copytree(first_cache / "pch", second_cache / "pch")
        (second_cache / "pch" / pch.name / "torch" / "extension.h").write_text("#error read as text\n")
        other = BuildPool(second_cache, workers=1, timeout_s=600, scratch_dir=tmp_path / "s2")
        try:
            again = asyncio.run(other.build(Candidate(1, 1, _EXT.format(k=2), Backend.CUDA)))
            assert again.status == "built", again.error
            assert other.stats["pch_used"] == 1 and other.stats["pch_built"] == 0 and other.stats["slim"] == 1
        finally:
            other.close()
    finally:
        pool.close()
    without, with_pch = _so_files(first_cache), _so_files(second_cache)
    assert without.keys() == with_pch.keys() and len(without) == 1
    assert without == with_pch  # byte for byte: the header's parse was skipped, nothing else changed


def test_a_candidate_cannot_make_the_pool_build_many_headers(tmp_path: Path) -> None:
    pool = BuildPool(tmp_path / "c", workers=1, scratch_dir=tmp_path / "s")
    try:
        for i in range(10):  # refused by build_pch (key mismatch), but each would count
            pool._want_pch({"key": f"k{i}", "with_cuda": False, "extra_cflags": [], "extra_include_paths": []})
        pool.wait_pch(60)
        assert len(pool._pch_keys) == pool.max_pch == 4 and pool.stats["pch_built"] == 0
    finally:
        pool.close()
