"""How much of a candidate's device time its own kernels took (the ``torch-work`` policy).

The kernel-ablation check (``Protocol.ablate_kernels``) shows that a candidate's kernels matter to its
output, but it runs on a copy of the model, and a candidate can tell that call apart (``id(self)``
differs, or its kernel's side effect is missing there) and return garbage only there. A token kernel
beside a full PyTorch computation then passes as a custom kernel while PyTorch does the work (the
"attack C" of README's "What it does not catch yet", EXPLOITS K-19/K-20 in substance). This module
measures what no such trick changes on the profiled call itself: the share of the call's device time
spent in kernels the candidate wrote.

- :func:`own_kernel_names`: the names of the kernels in the candidate's source (``@triton.jit``
  functions; ``__global__`` functions of CUDA sources held in the Python text).
- :func:`owns`: whether a kernel name as the CUDA profiler reports it is one of those.
- :func:`custom_kernel_share`: the share, from the worker's ``kernel_us`` (kernel name -> summed device
  microseconds of one profiled forward call, :meth:`.worker._Job.profile_kernels`).

Names decide ownership, so a name that looks like a vendor or PyTorch kernel (:data:`LIBRARY_KERNEL_PATTERNS`)
is never the candidate's own, even where the candidate gave its kernel that name: by name alone the
harness cannot tell a Triton kernel called ``gemm_kernel`` from cuBLAS's, and owning by name would let
a token kernel named like the GEMM it calls claim that GEMM's time. Such a candidate loses the credit
for that kernel (rename it). Names in a namespace (``ns::kernel``) never own either: every PyTorch,
CUTLASS, CUB and cuDNN kernel lives in one, and an own kernel in a namespace is rare.

Only the standard library is used here (the trusted side imports it; nothing of it runs in the
candidate's process).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

__all__ = ["LIBRARY_KERNEL_PATTERNS", "LIBRARY_MARKS", "LIBRARY_NAMESPACES", "own_kernel_names", "own_namespaces",
           "kernel_base_name", "is_library_kernel", "owns", "custom_kernel_share"]

#: Base names of profiled kernels (:func:`kernel_base_name`: no namespace, no arguments) that are never the
#: candidate's own, searched with :func:`re.search`. Each pattern is anchored on a vendor's own spelling, so that
#: an honest kernel with a common word in its name (``gemm_relu_kernel``, ``reduce_kernel``, ``dot_kernel``,
#: ``convolve_kernel``: a Gemini candidate for KernelBench L2/76 has exactly ``gemm_relu_kernel``) still owns.
#: cuBLAS's legacy kernels carry ``cublas...`` types in their template arguments (``gemv2T_kernel_val<...,
#: cublasGemvParamsEx<...>>``, ``dot_kernel<float, 128, 0, cublasDotParams<...>>``), caught by
#: :data:`LIBRARY_MARKS` on the whole name; PyTorch's own kernels are all in a namespace (``at::native::
#: vectorized_elementwise_kernel<...>``, ``at::native::reduce_kernel<...>``), which never owns. Sources: kernel
#: names in CUDA profiles of cuBLAS (``sm90_xmma_gemm_...``, ``ampere_sgemm_128x64_nn``, ``nvjet_tst_...``,
#: ``gemmSN_NN_kernel``, ``splitKreduce_kernel``), cuDNN (``implicit_convolve_sgemm``, ``nchwToNhwcKernel``,
#: ``winograd...``, ``fft2d_r2c_...``), memory-efficient attention (``fmha_cutlassF_...``) and torch.compile's
#: inductor (``triton_poi_fused_...``; before Triton 3, ``triton__0d1d2de``).
LIBRARY_KERNEL_PATTERNS: tuple[str, ...] = (
    r"^sm_?\d+_",  # cuBLAS / CUTLASS kernels named by architecture: sm90_xmma_gemm_..., sm80_xmma_...
    r"^(maxwell|pascal|volta|turing|ampere|ada|hopper|blackwell)_",  # cuBLAS's older names: ampere_sgemm_...
    r"^cutlass", r"^cublas", r"^cudnn", r"^nvjet", r"xmma", r"^fmha_", r"^flash_",
    r"^(gemv2[NT]|gemvNSP|gemmSN|gemmk1|gemv_kernel_val|gemm_kernel_val)_?", r"^[sdhcz]gemm_largek",
    r"^splitKreduce", r"^(implicit|explicit|precomputed)_convolve", r"^winograd", r"^fft\d", r"^(regular|vector)_fft",
    r"^(nchwToNhwc|nhwcToNchw)",
    r"^triton_(poi|red|per|tem|for|mm|bmm|fused)_", r"^triton__\d",  # inductor (torch.compile)
    r"^ncclDevKernel", r"^ncclKernel",
    r"^Memcpy", r"^Memset",  # copies and fills the profiler lists beside kernels
)
#: Marks of a vendor library anywhere in a profiled name (its template arguments included).
LIBRARY_MARKS: tuple[str, ...] = (r"cublas",)
#: Namespaces of libraries: a kernel in one never owns, even where the candidate's source declares it too.
LIBRARY_NAMESPACES = frozenset({"at", "c10", "cub", "cutlass", "cute", "cudnn", "thrust", "std", "torch",
                                "at_cuda_detail", "pytorch_flash", "flash", "cuda", "nvcuda", "cooperative_groups",
                                "triton", "fmha", "xformers"})
_MARKS = re.compile("|".join(f"(?:{p})" for p in LIBRARY_MARKS))
_LIBRARY = re.compile("|".join(f"(?:{p})" for p in LIBRARY_KERNEL_PATTERNS))

# Triton before 3.0 named a kernel ``<function>_<specialisation>``: per argument its index, then ``d``
# (divisible by 16), ``e`` (equal to 1) or ``c`` (constant), e.g. ``reduce_kernel_2d_0d1d2de3de``
# (seen in Triton 2.x TTIR/PTX dumps); Triton 3 uses the function's name as it is.
_TRITON_SUFFIX = re.compile(r"_(?:\d+[cde]*)+")

_JIT_WORDS = ("jit",)  # triton.jit, @jit (from triton import jit), triton.jit(...) with arguments
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)")
# bounded repetition: a source full of "__global__" (in a comment, say) costs linear time, not quadratic
_GLOBAL = re.compile(r"__global__\b([^;{}()]{0,200}?)\b([A-Za-z_]\w{0,200})\s*(?:<[^;{}()]{0,400}>\s*)?\(")
# a decorator block (decorator lines, and the indented or closing lines of a decorator spanning lines) and its def
_TEXT_DECORATED = re.compile(r"((?:^[ \t]*@[^\n]*\n(?:[ \t]+(?![ \t]|def\b|async\b|class\b|@)[^\n]*\n|[ \t]*[)\]][^\n]*\n)*)+)"
                             r"[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)", re.M)
_TEXT_JIT = re.compile(r"^[ \t]*@[ \t]*(?:[\w.]+\.)?jit\b", re.M)
_TEXT_JIT_CALL = re.compile(r"\b(?:[\w.]+\.)?jit\s*\(\s*([A-Za-z_]\w*)\s*[,)]")


def _dotted_tail(node: ast.expr) -> str:
    """The last name of a decorator expression: ``jit`` for ``triton.jit``, ``jit``, ``triton.jit(...)``."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _triton_names_ast(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    # triton's jit under another name: ``from triton import jit as tjit``
    words = set(_JIT_WORDS) | {a.asname for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                               and (node.module or "").split(".")[0] == "triton"
                               for a in node.names if a.name in _JIT_WORDS and a.asname}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(_dotted_tail(d) in words for d in node.decorator_list):
                out.add(node.name)
        elif isinstance(node, ast.Call) and _dotted_tail(node.func) in words and node.args:
            # kernel = triton.jit(fn): the compiled kernel carries fn's name
            if isinstance(node.args[0], ast.Name):
                out.add(node.args[0].id)
    return out


def _triton_names_text(source: str) -> set[str]:
    out = {m.group(2) for m in _TEXT_DECORATED.finditer(source) if _TEXT_JIT.search(m.group(1))}
    out.update(_TEXT_JIT_CALL.findall(source))
    return out


def _cuda_names(source: str) -> set[str]:
    text = _LAUNCH_BOUNDS.sub(" ", source)
    return {m.group(2) for m in _GLOBAL.finditer(text)} - {"void", "static", "inline"}


def own_kernel_names(source: str) -> set[str]:
    """Names of the device kernels the candidate wrote, from its Python source text.

    Triton: functions decorated with ``triton.jit`` / ``jit`` (called with arguments or not, under
    ``triton.autotune`` / ``triton.heuristics`` or not), and ``fn`` of ``triton.jit(fn)``; found with
    :mod:`ast`, or by a text scan when the source does not parse. CUDA: every ``__global__`` function
    in the text (``load_inline`` / ``load`` sources are string literals of the Python source), with
    ``template<...>``, ``extern "C"``, ``static`` and ``__launch_bounds__(...)`` allowed around it.

    Args:
        source: the candidate's Python source (``str``; any size).

    Returns:
        The kernel names (Python / C identifiers); empty when there is none. Never raises.
    """
    try:
        names = _triton_names_ast(ast.parse(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        names = _triton_names_text(source)
    return names | _cuda_names(source)


def kernel_base_name(profiled: str) -> str | None:
    """The function name in a kernel name as the CUDA profiler reports it, or None when it is in a
    namespace (or cannot be read).

    Handles demangled C++ names (``void my_kernel<float, 256>(float const*, float*, int)``,
    ``my_kernel(float const*, float*, int)``), ``extern "C"`` and Triton names (``my_kernel``), and
    Itanium-mangled names that were not demangled (``_Z9my_kernelPKfPfi``; nested ``_ZN...`` ones are
    in a namespace). ``ns::k(...)`` and ``(anonymous namespace)::k(...)`` give None.

    Args:
        profiled: the profiler event's name (``str``).
    """
    name = profiled.strip()
    if name.startswith("void "):
        name = name[5:].lstrip()
    if name.startswith("_Z"):
        m = re.match(r"_ZL?(\d+)", name)
        if not m:  # _ZN...E: nested (namespaced); anything else: unknown
            return None
        n = int(m.group(1))
        base = name[m.end():m.end() + n]
        return base if len(base) == n and re.fullmatch(r"[A-Za-z_]\w*", base) else None
    q = _qualified(name)
    return q[1] if q is not None and not q[0] else None


_NAMESPACE_DECL = re.compile(r"\bnamespace\s+([A-Za-z_]\w{0,100})\s*\{")
_ANON_NAMESPACE_DECL = re.compile(r"\bnamespace\s*\{")
_ANON = "(anonymous namespace)"


def own_namespaces(source: str) -> frozenset[str]:
    """The C++ namespaces the candidate's CUDA sources declare (``namespace fused {``; ``(anonymous namespace)``
    for ``namespace {``), less any library's (:data:`LIBRARY_NAMESPACES`): a kernel the profiler names in one of
    these can be the candidate's own (:func:`owns`). Never raises."""
    names = set(_NAMESPACE_DECL.findall(source)) - LIBRARY_NAMESPACES
    if _ANON_NAMESPACE_DECL.search(source):
        names.add(_ANON)
    return frozenset(names)


def _qualified(profiled: str) -> tuple[list[str], str] | None:
    """``(namespaces, name)`` of a demangled kernel name (``void fused::relu_k<float>(float*)`` ->
    ``(["fused"], "relu_k")``; ``(anonymous namespace)`` counts as one namespace), or None."""
    name = profiled.strip()
    if name.startswith("void "):
        name = name[5:].lstrip()
    name = name.replace(_ANON, "\x00")
    cut = len(name)
    for ch in "(<":
        i = name.find(ch)
        if i != -1:
            cut = min(cut, i)
    parts = [x.strip().replace("\x00", _ANON) for x in name[:cut].split("::")]
    base = parts[-1]
    if not re.fullmatch(r"[A-Za-z_][\w.$]*", base) or not all(parts[:-1]):
        return None
    return parts[:-1], base


def is_library_kernel(profiled: str) -> bool:
    """Whether a profiled kernel name looks like a vendor or PyTorch kernel: a library's mark anywhere in it
    (:data:`LIBRARY_MARKS`: cuBLAS's types in its template arguments), a library namespace
    (:data:`LIBRARY_NAMESPACES`), or a base name of a vendor's spelling (:data:`LIBRARY_KERNEL_PATTERNS`)."""
    if _MARKS.search(profiled):
        return True
    q = _qualified(profiled)
    base = kernel_base_name(profiled) if q is None else q[1]
    if q is not None and any(ns in LIBRARY_NAMESPACES for ns in q[0]):
        return True
    return base is not None and bool(_LIBRARY.search(base))


def owns(profiled: str, own: set[str] | frozenset[str], namespaces: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether the kernel the profiler reports as ``profiled`` is one of the candidate's ``own`` kernels.

    It is when its name (:func:`kernel_base_name`) equals an own name, or is an own name followed by a Triton 2
    specialisation suffix (``_0d1d2de``), and it looks like no library kernel (:func:`is_library_kernel`). A
    name in a namespace owns only when every namespace is one the candidate's source declares
    (``namespaces``, from :func:`own_namespaces`: ``fused::relu_k``, ``(anonymous namespace)::relu_k``).

    Args:
        profiled: the profiler event's name.
        own: names from :func:`own_kernel_names`.
        namespaces: from :func:`own_namespaces` (default: none, so a namespaced name never owns).
    """
    if not own:
        return False
    base = kernel_base_name(profiled)
    if base is None:
        q = _qualified(profiled)
        if q is None or not q[0] or not all(ns in namespaces for ns in q[0]):
            return False
        base = q[1]
    if is_library_kernel(profiled):
        return False
    if base in own:
        return True
    for name in own:
        if base.startswith(name) and _TRITON_SUFFIX.fullmatch(base[len(name):]):
            return True
    return False


def custom_kernel_share(kernel_us: Mapping[str, float], own: set[str] | frozenset[str],
                        *, top: int = 5, namespaces: frozenset[str] | set[str] = frozenset()
                        ) -> tuple[float | None, dict[str, object]]:
    """Share of one profiled call's device time spent in the candidate's own kernels.

    ``share = own_us / total_us``, where ``total_us`` sums every device activity the worker profiled
    (kernels, and the copies and fills PyTorch launches) and ``own_us`` those that :func:`owns`.

    Args:
        kernel_us: kernel name (as profiled) -> summed device time of one forward call, in microseconds
            (non-negative floats; other values are ignored).
        own: names from :func:`own_kernel_names`.
        top: how many of the largest non-own kernels the detail lists.
        namespaces: the source's own namespaces (:func:`own_namespaces`), passed to :func:`owns`.

    Returns:
        ``(share, detail)``: ``share`` in [0, 1], or None when no device time was profiled; ``detail``
        holds ``own_us``, ``total_us`` (rounded to 0.01 us), ``own_kernels`` (sorted names) and
        ``top_other`` (``[[name cut to 120 characters, us], ...]``, largest first).
    """
    own_us = total_us = 0.0
    owned: list[str] = []
    other: list[tuple[str, float]] = []
    for name, us in kernel_us.items():
        if not isinstance(name, str) or isinstance(us, bool) or not isinstance(us, (int, float)):
            continue
        if not us >= 0 or us == float("inf"):
            continue
        total_us += float(us)
        if owns(name, own, namespaces):
            own_us += float(us)
            owned.append(name)
        else:
            other.append((name, float(us)))
    other.sort(key=lambda t: -t[1])
    detail: dict[str, object] = {"own_us": round(own_us, 2), "total_us": round(total_us, 2),
                                 "own_kernels": sorted(owned)[:20],
                                 "top_other": [[n[:120], round(u, 2)] for n, u in other[:top]]}
    if total_us <= 0:
        return None, detail
    return own_us / total_us, detail
