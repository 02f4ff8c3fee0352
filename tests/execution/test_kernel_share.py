"""The custom-kernel share (``torch-work``): which kernels a candidate wrote, which profiled kernels are
those, the share of the profiled call's device time they took, the worker's device times, and the
verdict rule under each protocol. Everything here runs without a GPU and without a candidate process:
the verdict rule is exercised on the trusted side's ``_verdict`` with profiles in the shape the worker
sends on a GPU (``tests/exploits/test_exploits.py`` runs the whole evaluation of attack C's candidate).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from kernelbench_harness.cli.common import parse_kv
from kernelbench_harness.core import Backend, Candidate, Finding, Outcome, Severity, TimingStats
from kernelbench_harness.errors import ConfigError
from kernelbench_harness.execution.device import DeviceEvaluator, EvalJob
from kernelbench_harness.execution.kernelshare import (
    custom_kernel_share,
    kernel_base_name,
    own_kernel_names,
    owns,
)
from kernelbench_harness.execution.verify import Comparison
from kernelbench_harness.execution.worker import device_times
from kernelbench_harness.protocols import Protocol, get_protocol, setting_descriptions

from execution.evalkit import AFFINE

# --- which kernels the candidate wrote ----------------------------------------------------------------------
TRITON_FORMS = '''
import triton
import triton.language as tl
from triton import jit


@triton.jit
def plain_kernel(x_ptr):
    pass


@jit
def bare_kernel(x_ptr):
    pass


@triton.jit(do_not_specialize=["n"])
def called_kernel(x_ptr, n):
    pass


@triton.autotune(
    configs=[triton.Config({"BLOCK": 128}, num_warps=4),
             triton.Config({"BLOCK": 256}, num_warps=8)],
    key=["n"],
)
@triton.heuristics({"EVEN": lambda a: a["n"] % 128 == 0})
@triton.jit
def tuned_kernel(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    pass


def wrapped_later(x_ptr):
    pass


later = triton.jit(wrapped_later)


def helper(x):
    return x


class ModelNew:
    @staticmethod
    def forward(x):
        return x
'''

CUDA_FORMS = '''
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <cuda_runtime.h>
template <typename scalar_t, int BLOCK>
__global__ void __launch_bounds__(256, 2) templ_kernel(const scalar_t* __restrict__ x, scalar_t* y, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = x[i];
}

extern "C" __global__ void c_kernel(float* y) { y[0] = 1.0f; }

__global__ static void
    split_line_kernel (float* y)
{
}

namespace mine {
__global__ void spaced_kernel(float* y) {}
}

__device__ float not_a_kernel(float v) { return v; }

torch::Tensor run(torch::Tensor x) {
    templ_kernel<float, 256><<<1, 256>>>(x.data_ptr<float>(), x.data_ptr<float>(), 1);
    return x;
}
"""
ext = load_inline(name="forms", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=cuda_src,
                  functions=["run"])
'''


def test_own_triton_kernels_in_every_decorator_form() -> None:
    assert own_kernel_names(TRITON_FORMS) == {"plain_kernel", "bare_kernel", "called_kernel", "tuned_kernel",
                                              "wrapped_later"}


def test_own_triton_kernels_of_a_source_that_does_not_parse_by_a_text_scan() -> None:
    broken = TRITON_FORMS + "\ndef oops(:\n"
    assert own_kernel_names(broken) == {"plain_kernel", "bare_kernel", "called_kernel", "tuned_kernel",
                                        "wrapped_later"}


def test_own_cuda_kernels_with_templates_launch_bounds_extern_c_and_namespaces() -> None:
    # a kernel in a namespace is named too; its profiled (namespaced) name never owns (below)
    assert own_kernel_names(CUDA_FORMS) == {"templ_kernel", "c_kernel", "split_line_kernel", "spaced_kernel"}


def test_no_kernel_no_names() -> None:
    assert own_kernel_names("import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n") == set()
    assert own_kernel_names("") == set()


# --- which profiled kernels are those -----------------------------------------------------------------------
@pytest.mark.parametrize("profiled, base", [
    ("affine_kernel", "affine_kernel"),  # Triton 3, extern "C"
    ("affine_kernel(float const*, float*, long long, float)", "affine_kernel"),  # demangled by the profiler
    ("void templ_kernel<float, 256>(float const*, float*, int)", "templ_kernel"),
    ("void templ_kernel<at::Half, 256>(c10::Half const*, c10::Half*, int)", "templ_kernel"),
    ("_Z13affine_kernelPKfPfxf", "affine_kernel"),  # not demangled
    ("_ZL13affine_kernelPKfPfxf", "affine_kernel"),  # internal linkage
    ("_ZN4mine13spaced_kernelEPf", None),  # nested: in a namespace
    ("mine::spaced_kernel(float*)", None),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
     "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, "
     "at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, "
     "std::array<char*, 2ul>)", None),
    ("void (anonymous namespace)::k(float*)", None),
    ("", None),
])
def test_base_names_of_profiled_kernels(profiled: str, base: str | None) -> None:
    assert kernel_base_name(profiled) == base


OWN = {"affine_kernel", "templ_kernel", "spaced_kernel", "reduce_kernel_2d", "fused_gemm_relu_kernel",
       "gemm_kernel", "ampere_sgemm_128x64_nn", "cutlass_token", "triton_poi_fused_mul_0", "reduce_kernel",
       "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"}


@pytest.mark.parametrize("profiled", [
    "affine_kernel",
    "affine_kernel(float const*, float*, long long, float)",
    "void templ_kernel<float, 256>(float const*, float*, int)",
    "_Z13affine_kernelPKfPfxf",
    "reduce_kernel_2d_0d1d2de3de",  # Triton 2's specialisation suffix
    "affine_kernel_0d1d2d3de",
    "fused_gemm_relu_kernel",  # a vendor word inside an own name is not a vendor's name
    # common words at the start of an honest kernel's name (gemini-1.5-flash's candidate for KernelBench L2/76
    # has exactly gemm_relu_kernel): cuBLAS's and PyTorch's kernels of these names carry cuBLAS's types or a
    # namespace, so the plain names are the candidate's
    "gemm_kernel",
    "reduce_kernel",
    "void gemm_kernel<float>(float const*, float const*, float*, int, int, int)",
])
def test_own_kernels_own(profiled: str) -> None:
    assert owns(profiled, OWN)


@pytest.mark.parametrize("profiled", [
    "affine_kernel_fast",  # not a specialisation suffix
    "affine_kernel2",
    "other_kernel",
    "mine::spaced_kernel(float*)",  # namespaced: never
    "_ZN4mine13spaced_kernelEPf",
    # library names never own, even where the candidate named its kernel so (it would claim the library's time)
    "ampere_sgemm_128x64_nn",
    "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "cutlass_token",
    "triton_poi_fused_mul_0",
    # cuBLAS's legacy kernels, named like an own one but with cuBLAS's types in their template arguments
    "void gemm_kernel<float, 128, cublasGemmParams<float> >(cublasGemmParams<float>)",
    "void reduce_kernel<float, 128, cublasGemvTensorStridedBatched<float> >(float*)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
    "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
    "unsigned int, float, 4, 4> >(at::native::ReduceOp<...>)",
    "Memcpy DtoD (Device -> Device)",
])
def test_other_kernels_do_not_own(profiled: str) -> None:
    assert not owns(profiled, OWN)


def test_nothing_owns_without_own_kernels() -> None:
    assert not owns("affine_kernel", set())


# --- the share ----------------------------------------------------------------------------------------------
GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel"


def test_share_is_own_time_over_all_device_time() -> None:
    share, detail = custom_kernel_share({"flag_kernel": 2.0, GEMM: 190.0, "Memset (Device)": 8.0}, {"flag_kernel"})
    assert share == pytest.approx(0.01)
    assert detail["own_us"] == 2.0 and detail["total_us"] == 200.0 and detail["own_kernels"] == ["flag_kernel"]
    assert detail["top_other"] == [[GEMM, 190.0], ["Memset (Device)", 8.0]]


def test_share_none_without_device_time_and_bad_values_ignored() -> None:
    assert custom_kernel_share({}, {"k"})[0] is None
    assert custom_kernel_share({"k": 0.0}, {"k"})[0] is None
    share, detail = custom_kernel_share({"k": 5.0, "x": -1.0, "y": float("nan"), "z": True, "w": "3"}, {"k"})  # type: ignore[dict-item]
    assert share == 1.0 and detail["total_us"] == 5.0


# --- the worker's device times ------------------------------------------------------------------------------
CPU, CUDA = "cpu", "cuda"


def _ev(name: str, start: float, end: float, device: str = CUDA, **kw: Any) -> SimpleNamespace:
    return SimpleNamespace(name=name, device_type=device, time_range=SimpleNamespace(start=start, end=end), **kw)


def test_device_times_sum_kernels_copies_and_fills_and_skip_the_rest() -> None:
    events = [
        _ev("flag_kernel", 0.0, 1.5, activity_type="kernel"),
        _ev(GEMM, 2.0, 102.0, activity_type="kernel"),
        _ev(GEMM, 110.0, 210.0, activity_type="kernel"),
        _ev("Memcpy DtoD (Device -> Device)", 3.0, 7.0, activity_type="gpu_memcpy"),
        _ev("Memset (Device)", 1.0, 2.0),
        _ev("aten::mm", 0.0, 500.0, device=CPU),  # host side
        _ev("cudaLaunchKernel", 0.0, 5.0, device=CPU),
        _ev("Stream Sync", 0.0, 900.0, activity_type="cuda_sync"),  # a wait, not work
        _ev("cudaDeviceSynchronize", 0.0, 900.0),
        _ev("my_region", 0.0, 300.0, activity_type="gpu_user_annotation", is_user_annotation=True),
        SimpleNamespace(name="late_kernel", device_type=CUDA, time_range=None, device_time_total=4.0),
    ]
    assert device_times(events, CUDA) == {"flag_kernel": 1.5, GEMM: 200.0, "Memcpy DtoD (Device -> Device)": 4.0,
                                          "Memset (Device)": 1.0, "late_kernel": 4.0}
    assert device_times([], CUDA) == {}


# --- the verdict rule on the trusted side -------------------------------------------------------------------
_STATS = TimingStats(0.5, 0.5, 0.0, 0.5, 0.5, 0.5, 0.5, 3, (0.5, 0.5, 0.5), "cuda_events", "median")
GATED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def flag_kernel(x_ptr, flag_ptr):
    tl.store(flag_ptr, tl.load(x_ptr))
'''


def _evaluator(device: str = "cuda") -> DeviceEvaluator:
    """A trusted side that only judges (nothing started): its ``_verdict`` needs the device type alone."""
    ev = DeviceEvaluator.__new__(DeviceEvaluator)
    ev.device = torch.device(device)
    return ev


def _verdict(profile: dict[str, Any], *, protocol: Protocol | None = None, source: str = GATED,
             findings: list[Finding] | None = None, device: str = "cuda") -> tuple[Any, dict[str, Any]]:
    protocol = protocol or get_protocol("kbench")
    job = EvalJob(AFFINE, Candidate(1, AFFINE.problem_id, source, Backend.TRITON), protocol)
    checks: dict[str, Any] = {}
    res = _evaluator(device)._verdict(job, None, [Comparison(True)], True, list(findings or []), _STATS, {},
                                      {"extension_calls": 0, "triton_launches": 5}, profile, {}, checks)
    return res.with_(eager_ms=1.0, compile_ms=1.0), checks


def _profile(own_us: float, other_us: float) -> dict[str, Any]:
    kernels = {"flag_kernel": own_us, GEMM: other_us}
    return {"kernels": {k: 1 for k in kernels}, "streams": [7], "kernel_us": kernels}


def test_below_the_minimum_is_policy_torch_work_without_speedup() -> None:
    res, checks = _verdict(_profile(0.5, 999.5))
    assert res.outcome is Outcome.POLICY and res.tag == "torch-work" and res.correct
    assert res.extra["policy_allowed"] is False and res.speedup_eager is None and res.speedup_compile is None
    assert res.outcome.passed  # counts as passed in the correctness rate
    assert res.extra["custom_kernel_share"] == pytest.approx(0.0005) and checks == {"kernel_share": "judged"}
    f = next(f for f in res.findings if f.check == "runtime.kernel-share")
    assert f.severity is Severity.POLICY and f.data["top_other"][0][0] == GEMM


@pytest.mark.parametrize("own_us", [1.0, 10.0, 100.0])
def test_at_or_above_the_minimum_is_correct(own_us: float) -> None:
    res, checks = _verdict(_profile(own_us, 100.0 - own_us))
    assert res.outcome is Outcome.CORRECT and res.speedup_eager == 2.0, res
    assert res.extra["custom_kernel_share"] == pytest.approx(own_us / 100.0) and checks == {"kernel_share": "judged"}


@pytest.mark.parametrize("profile, why", [
    ({}, "no profile"),
    ({"error": "RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"}, "profiler failed"),
    ({"kernels": {}, "streams": []}, "no kernel times"),  # a worker from before kernel_us
    ({"kernels": {}, "streams": [], "kernel_us": {}}, "no device time"),
])
def test_no_usable_profile_leaves_the_verdict_and_says_not_judged(profile: dict[str, Any], why: str) -> None:
    res, checks = _verdict(profile)
    assert res.outcome is Outcome.CORRECT, res
    assert checks["kernel_share"].startswith("not judged: ") and why in checks["kernel_share"]
    assert "custom_kernel_share" not in res.extra


def test_a_cpu_device_without_a_profile_records_nothing() -> None:
    res, checks = _verdict({}, device="cpu")
    assert res.outcome is Outcome.CORRECT and checks == {} and "custom_kernel_share" not in res.extra


@pytest.mark.parametrize("name", ["kernelbench", "cuda-agent"])
def test_kernelbench_and_cuda_agent_record_the_share_only(name: str) -> None:
    res, checks = _verdict(_profile(0.5, 999.5), protocol=get_protocol(name))
    assert res.outcome is Outcome.CORRECT and res.extra["custom_kernel_share"] == pytest.approx(0.0005)
    assert checks == {"kernel_share": "judged"}


def test_torch_work_is_decided_before_the_precision_tag() -> None:
    half = Finding("runtime.precision", Severity.POLICY, "precision", "float16 matmul")
    res, _ = _verdict(_profile(0.5, 999.5), findings=[half])
    assert res.outcome is Outcome.POLICY and res.tag == "torch-work"
    res, _ = _verdict(_profile(50.0, 50.0), findings=[half])
    assert res.outcome is Outcome.POLICY and res.tag == "precision"


def test_a_library_named_own_kernel_gets_no_credit() -> None:
    """A token kernel named like the GEMM it sits beside does not claim the GEMM's time."""
    named = GATED.replace("flag_kernel", GEMM)
    res, _ = _verdict({"kernel_us": {GEMM: 1000.0}}, source=named)
    assert res.outcome is Outcome.POLICY and res.tag == "torch-work" and res.extra["custom_kernel_share"] == 0.0


# --- the protocol setting -----------------------------------------------------------------------------------
def test_protocol_defaults_and_override() -> None:
    assert get_protocol("kbench").min_custom_kernel_share == 0.01
    assert get_protocol("kernelbench").min_custom_kernel_share == 0.0
    assert get_protocol("cuda-agent").min_custom_kernel_share == 0.0
    assert get_protocol("kbench", **parse_kv(("min_custom_kernel_share=0.05",), "-P value")).min_custom_kernel_share == 0.05
    assert get_protocol("kernelbench", min_custom_kernel_share=0.02).min_custom_kernel_share == 0.02
    for bad in (-0.1, 1.5, "high"):
        with pytest.raises(ConfigError):
            get_protocol("kbench", min_custom_kernel_share=bad)
    assert "device time" in setting_descriptions()["min_custom_kernel_share"]  # `kbench protocols show`


def test_a_protocol_stored_before_the_setting_loads_with_zero_and_keeps_its_fingerprint() -> None:
    for name in ("kbench", "kernelbench", "cuda-agent"):
        old = get_protocol(name).to_dict()
        del old["min_custom_kernel_share"]
        back = Protocol.from_dict(old)
        assert back.min_custom_kernel_share == 0.0
        assert back.timing_fingerprint() == get_protocol(name).timing_fingerprint()
    # kernelbench and cuda-agent keep their fingerprints; kbench's changes (0.01), so new runs group apart
    assert get_protocol("kernelbench").fingerprint() == "db9af2d9e5bc213b"
    assert get_protocol("cuda-agent").fingerprint() == "c1804f5179c91364"
    old_kb = get_protocol("kbench").to_dict()
    del old_kb["min_custom_kernel_share"]
    assert Protocol.from_dict(old_kb).fingerprint() == "ad950888a8c699db"  # what kbench runs stored before it
    assert get_protocol("kbench").fingerprint() == "9a62392a0c88d6a7"


def _profiling_job(call):
    """A stand-in for the worker's job whose profiled call is ``call``, on a "cuda" device."""
    from types import SimpleNamespace

    return SimpleNamespace(device=torch.device("cuda"), load_set=lambda i: [torch.ones(3)], call=call,
                           sync=lambda: None)


@pytest.fixture()
def cpu_profiler(monkeypatch):
    """The worker's profiler on this CPU-only machine: the CPU profiler stands in for CUDA's."""
    import torch.autograd.profiler as ap

    real = ap.profile
    monkeypatch.setattr(ap, "profile", lambda **kw: real(use_cpu=True))


def test_a_call_that_raises_only_when_profiled_is_the_candidates_error(cpu_profiler):
    """A candidate that reads the profiler's state and raises there must not pass for a profiler failure (which
    leaves the share unjudged): the worker reports ``call_error``, and the trusted side fails the candidate."""
    from kernelbench_harness.execution.worker import _Job

    def call(a):
        if torch.autograd._profiler_enabled():
            raise RuntimeError("no")
        return a[0]

    got = _Job.profile_kernels(_profiling_job(call), 0)
    assert got == {"call_error": "RuntimeError: no", "oom": False}
    assert "error" not in got  # not the profiler's failure

    def oom(a):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1024.00 GiB")

    assert _Job.profile_kernels(_profiling_job(oom), 0)["oom"] is True


def test_a_profiler_that_cannot_start_is_the_profilers_failure(monkeypatch):
    import torch.autograd.profiler as ap
    import torch.profiler as tp

    from kernelbench_harness.execution.worker import _Job

    def broken(**kw):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    monkeypatch.setattr(ap, "profile", broken)
    monkeypatch.setattr(tp, "profile", broken)
    got = _Job.profile_kernels(_profiling_job(lambda a: a[0]), 0)
    assert "call_error" not in got and "CUPTI_ERROR_NOT_INITIALIZED" in got["error"]


def test_the_trusted_side_fails_a_candidate_whose_profiled_call_raised():
    """device.py turns the worker's ``call_error`` into the candidate's runtime error (or oom), before any verdict."""
    import inspect

    from kernelbench_harness.execution import device

    assert device.profiled_call_failure({"call_error": "RuntimeError: no", "oom": False}) == (
        "runtime_error", "the profiled call raised: RuntimeError: no")
    assert device.profiled_call_failure({"call_error": "OutOfMemoryError: x", "oom": True})[0] == "oom"
    assert device.profiled_call_failure({"error": "RuntimeError: CUPTI"}) is None  # the profiler's: not judged
    assert device.profiled_call_failure({"kernels": {}, "kernel_us": {}}) is None
    src = inspect.getsource(device.DeviceEvaluator._run_candidate)  # and the slot raises it when it is one
    i = src.index('expect(run_deadline, "profile")')
    assert "profiled_call_failure(profile)" in src[i:i + 300] and "_ChildFailed(*failed)" in src[i:i + 400]


@pytest.mark.parametrize("profiled,own", [
    ("gemm_relu_kernel(float const*, float const*, float*, int, int, int)", {"gemm_relu_kernel"}),
    ("gemv_kernel", {"gemv_kernel"}),
    ("elementwise_kernel", {"elementwise_kernel"}),
    ("convolve_kernel(float*)", {"convolve_kernel"}),
    ("dot_kernel", {"dot_kernel"}),
    ("void my_kernel<cutlass::half_t>(cutlass::half_t*)", {"my_kernel"}),  # a vendor type as an argument only
])
def test_honest_kernels_named_with_common_words_own(profiled: str, own: set[str]) -> None:
    """Review helper-63: each of these honest names got no credit (policy(torch-work) for a real candidate)."""
    assert owns(profiled, own)
    assert custom_kernel_share({profiled: 90.0, "Memcpy DtoD (Device -> Device)": 10.0}, own)[0] == 0.9


@pytest.mark.parametrize("profiled", [
    "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "ampere_sgemm_128x64_nn", "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT",
    "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, "
    "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
    "cublasGemvTensorStridedBatched<float>, float> >(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
    "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>, float, float)",
    "void dot_kernel<float, 128, 0, cublasDotParams<cublasGemvTensor<float const>, cublasGemvTensorStridedBatched<float> > >"
    "(cublasDotParams<cublasGemvTensor<float const>, cublasGemvTensorStridedBatched<float> >)",
    "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int, float const*)",
    "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4::Params)",
    "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(float*)",
    "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
    "triton_poi_fused_mul_0",
])
def test_vendor_kernels_never_own_even_under_the_same_name(profiled: str) -> None:
    from kernelbench_harness.execution.kernelshare import kernel_base_name

    base = kernel_base_name(profiled) or profiled.split("(")[0].split("<")[0].split("::")[-1].removeprefix("void ")
    assert not owns(profiled, {base, "gemv2T_kernel_val", "dot_kernel", "Kernel2", "nchwToNhwcKernel"},
                    frozenset({"cutlass", "cudnn", "engines_precompiled"}))


def test_a_kernel_in_a_namespace_the_source_declares_owns() -> None:
    from kernelbench_harness.execution.kernelshare import own_namespaces

    src = 'cuda_src = """\nnamespace fused {\n__global__ void relu_k(float* x) {}\n}\nnamespace {\n' \
          '__global__ void add_k(float* x) {}\n}\nnamespace at { }\n"""\n'
    ns = own_namespaces(src)
    assert ns == {"fused", "(anonymous namespace)"}  # at: a library's, even when declared
    own = own_kernel_names(src)
    assert owns("fused::relu_k(float*)", own, ns) and owns("void (anonymous namespace)::add_k(float*)", own, ns)
    assert not owns("fused::relu_k(float*)", own)  # without the source's namespaces: no credit
    assert not owns("other::relu_k(float*)", own, ns) and not owns("at::relu_k(float*)", own, ns | {"at"})


def test_triton_jit_imported_under_another_name_is_found() -> None:
    src = "from triton import jit as tjit\n\n@tjit\ndef k(x_ptr):\n    pass\n"
    assert own_kernel_names(src) == {"k"}


def test_a_source_full_of_global_words_does_not_stall_the_scan() -> None:
    """Review helper-63: ``'# ' + '__global__ ' * 4000`` took 12 s (88 KB: 56 s) with the unbounded pattern, a
    slot stalled by a comment (a hang guard with a wide margin, not a speed target: here it takes milliseconds)."""
    import time

    t0 = time.perf_counter()
    own_kernel_names("# " + "__global__ " * 8000)
    own_kernel_names("x = (\n" + "  @x\n" * 40 + "def")  # does not parse: the text scan's decorator blocks
    assert time.perf_counter() - t0 < 10.0
