"""The fused fp64-bound passes (execution/fusedjudge.py) give the same Comparison as the PyTorch passes,
field for field, under Triton's interpreter: NaN, infinities of either sign, signed zeros, subnormals,
values near the float32 maximum, every floating dtype, sizes that are not a multiple of the block."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(r"""
    import dataclasses, json, math, sys
    import torch
    from kernelbench_harness.execution import verify, fusedjudge

    CALLS = {"first_pass": 0, "errors": 0}
    for name in CALLS:
        def counted(*a, _f=getattr(fusedjudge, name), _n=name, **k):
            CALLS[_n] += 1
            return _f(*a, **k)
        setattr(fusedjudge, name, counted)

    def norm(v):
        if isinstance(v, float) and math.isnan(v):
            return "nan"
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [norm(x) for x in v]
        return v

    def both(o, r, r64, **kw):
        kw.setdefault("atol", 1e-4); kw.setdefault("rtol", 1e-4)
        verify._FUSED_ON_CPU = False
        plain = verify.compare_outputs([o], [r], judge="fp64-bound", refs64=[r64], chunk_elems=3000, **kw)
        verify._FUSED_ON_CPU = True
        assert fusedjudge.usable(o, r, r64, interpret=True)
        before = dict(CALLS)
        fused = verify.compare_outputs([o], [r], judge="fp64-bound", refs64=[r64], chunk_elems=3000, **kw)
        verify._FUSED_ON_CPU = False
        # the fused kernels ran (a failure would fall back to the PyTorch passes and agree trivially)
        assert not verify._FUSED_OFF
        assert CALLS["first_pass"] == before["first_pass"] + 1
        return norm(dataclasses.asdict(plain)), norm(dataclasses.asdict(fused)), CALLS["errors"] - before["errors"]

    g = torch.Generator().manual_seed(7)
    n = 10_000 + 37  # three blocks and a ragged end
    base64 = torch.randn(n, generator=g, dtype=torch.float64) * 3
    cases = {}

    def case(name, o, r, r64, **kw):
        cases[name] = both(o, r, r64, **kw)

    r = base64.float(); r64 = base64.clone()
    case("honest", (r64 + 1e-8 * torch.randn(n, generator=g, dtype=torch.float64)).float(), r, r64)
    bad = r.clone(); bad[::97] += 1e-2
    case("wrong", bad, r, r64)
    o = r.clone(); o[5] = float("nan"); rn = r.clone(); rn[5] = float("nan"); j = r64.clone(); j[5] = float("nan")
    case("nan_same_place", o, rn, j)
    case("nan_same_place_fail_policy", o, rn, j, nan_policy="fail")
    o = r.clone(); o[9] = float("nan")
    case("nan_only_in_output", o, r, r64)
    j = r64.clone(); j[11] = float("nan"); rn = r.clone(); rn[11] = float("nan")
    case("nan_only_in_reference", r.clone(), rn, j)
    o = r.clone(); o[3] = float("-inf"); j = r64.clone(); j[3] = float("inf"); rr = r.clone(); rr[3] = float("inf")
    case("inf_of_the_other_sign", o, rr, j)
    o = r.clone(); o[3] = float("inf")
    case("inf_same_sign", o, rr, j)
    o = r.clone(); o[3] = float("nan")
    case("nan_against_inf", o, rr, j)
    # the float32 reference overflows where the float64 one does not: its own error leaves that element out
    j = r64.clone(); j[20] = 3.5e38; rr = r.clone(); rr[20] = float("inf"); o = r.clone(); o[20] = 3.4e38
    case("reference_overflows_in_float32", o, rr, j)
    z = torch.zeros(n); z64 = torch.zeros(n, dtype=torch.float64)
    zo = z.clone(); zo[1::2] = -0.0
    case("signed_zeros", zo, z, z64)
    sub64 = torch.full((n,), 1e-310, dtype=torch.float64); sub64[::3] = 0.0
    case("subnormal_reference", torch.full((n,), 1e-40), sub64.float(), sub64)
    big64 = torch.full((n,), 3.0e38, dtype=torch.float64); big64[::2] = -3.0e38
    bo = big64.float().clone(); bo[7] = float("inf")
    case("near_fp32_max", bo, big64.float(), big64)
    for dt in (torch.float16, torch.bfloat16):
        rl = base64.to(dt); rl64 = rl.double() + 1e-4 * torch.randn(n, generator=g, dtype=torch.float64)
        case(f"{dt}_honest", rl.clone(), rl, rl64)
        ol = rl.clone(); ol[::50] = ol[::50] * 1.5
        case(f"{dt}_wrong", ol, rl, rl64)
    case("float64_output", r64 + 1e-9, r, r64)
    case("half_output_of_a_float_reference", r.half(), r, r64)
    case("one_element", r[:1] + 1e-3, r[:1], r64[:1])
    print(json.dumps(cases))
""")


def test_fused_passes_match_the_pytorch_passes_field_for_field(tmp_path: Path) -> None:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600,
                         cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    cases = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(cases) == 20
    for name, (plain, fused, fused_errors) in cases.items():
        assert fused == plain, (name, plain, fused)
        # the second pass ran fused wherever the first left a bound to measure against
        assert fused_errors == (1 if plain["bound"] is not None else 0), name
    # the cases reach what they are about (a fused pass agreeing on nothing would be no test)
    assert cases["honest"][0]["ok"] and not cases["wrong"][0]["ok"] and cases["wrong"][0]["mismatches"] > 0
    assert cases["nan_same_place"][0]["ok"]
    assert cases["nan_same_place_fail_policy"][0]["reason"] == "nan"
    for name in ("nan_only_in_output", "nan_only_in_reference", "inf_of_the_other_sign", "nan_against_inf"):
        assert cases[name][0]["reason"] == "nan", name
    assert cases["inf_same_sign"][0]["ok"]
    assert cases["reference_overflows_in_float32"][0]["ref_err"] < 1e-5
    assert cases["near_fp32_max"][0]["reason"] == "nan"
    assert not cases["torch.float16_wrong"][0]["ok"] and not cases["torch.bfloat16_wrong"][0]["ok"]


def test_small_or_strided_or_cpu_outputs_take_the_pytorch_passes() -> None:
    import torch

    from kernelbench_harness.execution import fusedjudge

    r = torch.randn(64, 64)
    r64 = r.double()
    assert not fusedjudge.usable(r, r, r64)  # on the CPU without the interpreter
    assert not fusedjudge.usable(r.t(), r, r64, interpret=True)  # not contiguous
    assert not fusedjudge.usable(r, r, r, interpret=True)  # the judge's reference is not float64
    assert not fusedjudge.usable(r.int(), r, r64, interpret=True)  # not floating
    assert not fusedjudge.usable(r[:10], r, r64, interpret=True)  # shapes differ
    assert fusedjudge.MIN_ELEMS >= 1 << 20  # small outputs: the launches cost more than the bytes


def test_both_kernels_build_for_sm90_with_the_installed_triton() -> None:
    # the interpreter runs neither PTX generation nor ptxas: a kernel that only fails there (Triton 3.9's
    # ieee_rounding division on float64 did) would switch the fused passes off on every GPU
    import pytest

    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernelbench_harness.execution import fusedjudge

    k1, k2 = fusedjudge._kernels()
    for od, rd in (("fp32", "fp32"), ("bf16", "fp16"), ("fp64", "fp32")):
        sig1 = {"o_ptr": "*" + od, "r_ptr": "*" + rd, "j_ptr": "*fp64", "n": "i64", "scale_out": "*fp64",
                "referr_out": "*fp64", "counts_out": "*i64", "BLOCK": "constexpr"}
        sig2 = {"o_ptr": "*" + od, "j_ptr": "*fp64", "n": "i64", "scalars": "*fp64", "abs_out": "*fp64",
                "rel_out": "*fp64", "counts_out": "*i64", "BLOCK": "constexpr"}
        for fn, sig in ((k1, sig1), (k2, sig2)):
            compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs={"BLOCK": fusedjudge.BLOCK}),
                                      target=GPUTarget("cuda", 90, 32))
            assert compiled.asm.get("cubin"), (od, rd, fn)
            if fn is k2:
                assert "div.rn.f64" in compiled.asm["ptx"]  # correctly rounded float64 division


def test_the_kernels_build_in_a_cache_of_their_own(monkeypatch) -> None:
    import os

    from kernelbench_harness.execution import fusedjudge

    monkeypatch.setenv("TRITON_CACHE_DIR", "/somewhere/shared")
    with fusedjudge._own_cache():
        inside = os.environ["TRITON_CACHE_DIR"]
    assert inside != "/somewhere/shared" and os.path.isdir(inside) and "kb-judge-triton-" in inside
    assert os.environ["TRITON_CACHE_DIR"] == "/somewhere/shared"  # put back after


def test_a_failing_fused_kernel_falls_back_to_the_pytorch_passes(monkeypatch) -> None:
    import torch

    from kernelbench_harness.execution import fusedjudge, verify

    r64 = torch.randn(5000, dtype=torch.float64)
    r = r64.float()
    expected = verify.compare_outputs([r.clone()], [r], judge="fp64-bound", refs64=[r64], atol=1e-4, rtol=1e-4)

    def broken(*_a, **_k):
        raise RuntimeError("PTX assembly failed")

    monkeypatch.setattr(verify, "_FUSED_ON_CPU", True)
    monkeypatch.setattr(verify, "_FUSED_OFF", False)
    monkeypatch.setattr(fusedjudge, "usable", lambda *a, **k: True)
    monkeypatch.setattr(fusedjudge, "first_pass", broken)
    got = verify.compare_outputs([r.clone()], [r], judge="fp64-bound", refs64=[r64], atol=1e-4, rtol=1e-4)
    assert got == expected and got.ok
    assert verify._FUSED_OFF  # not tried again in this process

    # Triton running out of device memory loading a kernel: the PyTorch passes this once, fused again after
    def short_of_memory(*_a, **_k):
        raise RuntimeError("Triton Error [CUDA]: out of memory")

    monkeypatch.setattr(verify, "_FUSED_OFF", False)
    monkeypatch.setattr(fusedjudge, "first_pass", short_of_memory)
    got = verify.compare_outputs([r.clone()], [r], judge="fp64-bound", refs64=[r64], atol=1e-4, rtol=1e-4)
    assert got == expected and not verify._FUSED_OFF

    # a device out-of-memory error from torch goes to the caller (its retry with the cache handed back)
    def torch_oom(*_a, **_k):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(fusedjudge, "first_pass", torch_oom)
    import pytest

    with pytest.raises(torch.OutOfMemoryError):
        verify.compare_outputs([r.clone()], [r], judge="fp64-bound", refs64=[r64], atol=1e-4, rtol=1e-4)
