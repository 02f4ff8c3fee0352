"""Integrity checks on candidates: static analysis of the source, and runtime checks.

Static analysis reads the candidate's AST (and the kernel source strings it carries); it never
imports the candidate. Each finding names its check, a severity and a verdict tag (EXPLOITS.md):

=========================  ===========  =========================================================
check                      severity     what it looks for
=========================  ===========  =========================================================
static.reference-use       cheat        the reference ``Model`` named, called or subclassed
static.no-kernel           cheat        no custom kernel at all (no load_inline / triton.jit ...)
static.fallback            warn         try/except around a kernel whose handler runs PyTorch ops
static.threads             cheat        threads, processes, executors, ``os.fork``
static.timer-tamper        cheat        assignment to timers or comparison functions
static.global-state        cheat        process-wide backend switches (TF32, cudnn.benchmark ...)
static.tensor-subclass     cheat        ``torch.Tensor`` subclasses, ``__torch_function__`` ...
static.introspection       cheat        gc, inspect, frames, ``sys.modules``, the harness package
static.side-stream         warn         new CUDA streams (the timer checks what they do)
static.precision           policy       half / bfloat16 / TF32 / tensor-core fp16 math
static.subprocess          warn         subprocess / os.system
static.network             cheat        sockets, HTTP clients
=========================  ===========  =========================================================

Runtime checks live in the worker (they need the live objects); helpers here snapshot and compare
process-wide state.
"""

from __future__ import annotations

import ast
import re
from typing import Any, Iterable

from ..core import Finding, Severity

__all__ = [
    "static_findings",
    "GLOBAL_FLAG_NAMES",
    "snapshot_global_flags",
    "KERNEL_MARKERS",
]

KERNEL_MARKERS = ("load_inline", "cpp_extension.load", "triton.jit", "@jit", "RawKernel", "cuda.jit",
                  "ElementwiseKernel", "numba", "tl.", "cupy", "cuda_sources", "__global__")

_THREAD_CALLS = {"Thread", "Timer", "ThreadPoolExecutor", "ProcessPoolExecutor", "Process", "Pool", "fork",
                 "start_new_thread", "_start_new_thread", "run_in_executor", "forkpty", "spawn"}
_THREAD_MODULES = {"threading", "_thread", "multiprocessing", "concurrent", "concurrent.futures", "asyncio"}
_INTROSPECTION_MODULES = {"gc", "inspect", "traceback", "kernelbench_harness", "__main__", "builtins", "importlib"}
_INTROSPECTION_ATTRS = {"_getframe", "getframe", "f_back", "f_globals", "f_locals", "get_objects", "get_referrers",
                        "get_referents", "stack", "currentframe", "modules", "settrace", "setprofile",
                        "__subclasses__", "__globals__", "gi_frame", "tb_frame", "__builtins__"}
_TIMER_NAMES = {"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns",
                "process_time", "elapsed_time", "Event", "synchronize", "record", "allclose", "isclose",
                "equal", "assert_close", "assert_allclose", "testing", "do_bench", "max", "abs", "all", "any",
                "__eq__", "__sub__"}
_TIMER_OWNERS = {"time", "torch", "torch.cuda", "torch.cuda.Event", "cuda.Event", "Event", "torch.testing",
                 "numpy", "np", "torch.Tensor", "Tensor", "triton.testing", "math", "builtins"}
_GLOBAL_FLAG_FUNCS = {"set_float32_matmul_precision", "set_default_dtype", "set_flush_denormal",
                      "use_deterministic_algorithms", "set_default_tensor_type", "set_num_threads",
                      "set_default_device", "set_per_process_memory_fraction", "set_rng_state"}
_PRECISION_ATTRS = {"half", "bfloat16", "float16", "bf16", "fp16"}
_PRECISION_KERNEL_RE = re.compile(r"\b(__half2?|__nv_bfloat162?|half2|__float2half|__half2float|__float2bfloat16|"
                                  r"wmma::|mma\.sync[^\n]*f16|tl\.float16|tl\.bfloat16|hmma|__hadd|__hmul|"
                                  r"input_precision\s*=\s*[\"'](tf32|tf32x3)|allow_tf32\s*=\s*True)\b")
_STREAM_RE = re.compile(r"\b(cudaStreamCreate\w*|getStreamFromPool|cudaStreamNonBlocking|cudaLaunchHostFunc)\b")
_NETWORK_MODULES = {"socket", "urllib", "urllib.request", "http", "http.client", "requests", "httpx", "aiohttp",
                    "ftplib", "smtplib", "ssl"}


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for an attribute chain / name, else ''."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _f(check: str, sev: Severity, tag: str, msg: str, node: ast.AST | None = None, **data: Any) -> Finding:
    if node is not None and hasattr(node, "lineno"):
        data.setdefault("line", getattr(node, "lineno"))
    return Finding(check=check, severity=sev, tag=tag, message=msg, data=data)


def _string_constants(tree: ast.AST) -> str:
    return "\n".join(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))


def _has_kernel(tree: ast.AST, source: str) -> bool:
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            name = _dotted(n.func)
            if name.endswith(("load_inline", "cpp_extension.load", "RawKernel", "RawModule", "ElementwiseKernel",
                              "ReductionKernel")) or name in ("load", "compile_kernel"):
                return True
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in n.decorator_list:
                dn = _dotted(d.func if isinstance(d, ast.Call) else d)
                if dn.endswith(("jit", "autotune", "heuristics", "kernel")):
                    return True
    return "__global__" in _string_constants(tree)


def _kernel_call_names(tree: ast.AST) -> set[str]:
    """Names bound to extensions / jitted kernels (module-level assignments from load_inline, jit defs)."""
    names: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
            fn = _dotted(n.value.func)
            if fn.endswith(("load_inline", "load")):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        names.add(t.id)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in n.decorator_list:
                dn = _dotted(d.func if isinstance(d, ast.Call) else d)
                if dn.endswith(("jit", "autotune", "heuristics")):
                    names.add(n.name)
    return names


def _calls_torch(nodes: Iterable[ast.AST]) -> bool:
    for stmt in nodes:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Call):
                name = _dotted(n.func)
                if name.startswith(("torch.", "F.", "nn.", "self.", "super")) or name in ("torch",):
                    return True
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
                return True
    return False


def static_findings(source: str) -> list[Finding]:
    """Static integrity findings for candidate ``source`` (see the module docstring's table).

    A source that does not parse gives one ``static.syntax`` finding (severity info); the build
    then reports the compile error.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return [Finding("static.syntax", Severity.INFO, "", f"syntax error at line {e.lineno}: {e.msg}")]
    out: list[Finding] = []
    strings = _string_constants(tree)

    # K-19: the reference, by name or as a base class
    for n in ast.walk(tree):
        if isinstance(n, ast.ClassDef):
            for b in n.bases:
                if _dotted(b) in ("Model",) or _dotted(b).endswith(".Model"):
                    out.append(_f("static.reference-use", Severity.CHEAT, "no-custom-kernel",
                                  f"class {n.name} subclasses the reference Model", n))
        elif isinstance(n, ast.Name) and n.id == "Model" and isinstance(n.ctx, ast.Load):
            out.append(_f("static.reference-use", Severity.CHEAT, "no-custom-kernel", "uses the reference Model", n))
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]
            for m in mods:
                root = m.split(".")[0]
                if root in _THREAD_MODULES or m in _THREAD_MODULES:
                    out.append(_f("static.threads", Severity.CHEAT, "deferred-work", f"imports {m}", n))
                if root in _INTROSPECTION_MODULES:
                    out.append(_f("static.introspection", Severity.CHEAT, "introspection", f"imports {m}", n))
                if root in _NETWORK_MODULES or m in _NETWORK_MODULES:
                    out.append(_f("static.network", Severity.CHEAT, "network", f"imports {m}", n))
                if root in ("subprocess", "pty"):
                    out.append(_f("static.subprocess", Severity.WARN, "subprocess", f"imports {m}", n))
                if root == "ctypes":
                    out.append(_f("static.introspection", Severity.WARN, "ctypes", "imports ctypes", n))
            if isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "kernelbench_harness":
                pass  # already reported above
    # calls
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            name = _dotted(n.func)
            last = name.rsplit(".", 1)[-1]
            if last in _THREAD_CALLS and (name.split(".")[0] in {"threading", "_thread", "multiprocessing", "os",
                                                                   "concurrent", "futures", "mp", "pty", "asyncio",
                                                                   "loop"} or last in {"Thread", "ThreadPoolExecutor",
                                                                                       "ProcessPoolExecutor"}):
                out.append(_f("static.threads", Severity.CHEAT, "deferred-work", f"calls {name}()", n))
            if name in ("os.system", "os.popen", "os.execv", "os.execve", "os.spawnv") or name.startswith("subprocess."):
                out.append(_f("static.subprocess", Severity.WARN, "subprocess", f"calls {name}()", n))
            if last in _GLOBAL_FLAG_FUNCS and name.startswith(("torch", "cuda")):
                out.append(_f("static.global-state", Severity.CHEAT, "global-state", f"calls {name}()", n))
            if name in ("setattr", "builtins.setattr") and n.args:
                tgt = _dotted(n.args[0])
                attr = n.args[1].value if len(n.args) > 1 and isinstance(n.args[1], ast.Constant) else ""
                if tgt in _TIMER_OWNERS or str(attr) in _TIMER_NAMES:
                    out.append(_f("static.timer-tamper", Severity.CHEAT, "timer-tamper",
                                  f"setattr on {tgt}.{attr}", n))
                if tgt.startswith("torch.backends"):
                    out.append(_f("static.global-state", Severity.CHEAT, "global-state", f"setattr on {tgt}", n))
            if last in ("_make_subclass", "_make_wrapper_subclass", "as_subclass"):
                out.append(_f("static.tensor-subclass", Severity.CHEAT, "non-plain-tensor", f"calls {name}()", n))
            if name in ("globals", "vars", "locals", "__import__", "eval", "exec", "compile", "getattr") and \
                    name in ("globals", "__import__", "eval", "exec"):
                out.append(_f("static.introspection", Severity.CHEAT, "introspection", f"calls {name}()", n))
            if last == "Stream" and name.startswith(("torch.cuda", "cuda", "torch")):
                out.append(_f("static.side-stream", Severity.WARN, "side-stream", f"creates a stream: {name}()", n))
            if last in _PRECISION_ATTRS and isinstance(n.func, ast.Attribute):
                out.append(_f("static.precision", Severity.POLICY, "precision", f"casts with .{last}()", n))
            if last in ("to", "type") and any(_dotted(a).endswith(("float16", "bfloat16", "half")) for a in n.args):
                out.append(_f("static.precision", Severity.POLICY, "precision", f"casts to lower precision", n))
            if last == "autocast":
                out.append(_f("static.precision", Severity.POLICY, "precision", "uses autocast", n))
        elif isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                name = _dotted(t)
                if not name or "." not in name:
                    continue
                owner, attr = name.rsplit(".", 1)
                if name.startswith("torch.backends") or attr in ("allow_tf32", "benchmark", "deterministic",
                                                                 "allow_fp16_reduced_precision_reduction",
                                                                 "allow_bf16_reduced_precision_reduction"):
                    out.append(_f("static.global-state", Severity.CHEAT, "global-state", f"assigns {name}", n))
                elif attr in _TIMER_NAMES and (owner in _TIMER_OWNERS or owner.startswith(("torch", "time", "np",
                                                                                           "numpy", "triton"))):
                    out.append(_f("static.timer-tamper", Severity.CHEAT, "timer-tamper", f"assigns {name}", n))
                elif owner in ("torch", "torch.Tensor", "Tensor", "torch.nn.functional", "F", "torch.cuda") and \
                        isinstance(n, ast.Assign):
                    out.append(_f("static.timer-tamper", Severity.CHEAT, "timer-tamper",
                                  f"replaces library function {name}", n))
        elif isinstance(n, ast.ClassDef):
            for b in n.bases:
                bn = _dotted(b)
                if bn in ("torch.Tensor", "Tensor") or bn.endswith("._C.TensorBase") or bn == "TensorBase":
                    out.append(_f("static.tensor-subclass", Severity.CHEAT, "non-plain-tensor",
                                  f"class {n.name} subclasses {bn}", n))
            for item in n.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in (
                        "__torch_function__", "__torch_dispatch__"):
                    out.append(_f("static.tensor-subclass", Severity.CHEAT, "non-plain-tensor",
                                  f"class {n.name} defines {item.name}", item))
        elif isinstance(n, ast.Attribute):
            owner = _dotted(n.value)
            if (n.attr in _INTROSPECTION_ATTRS - {"modules", "stack", "getframe"}) or \
                    (n.attr == "modules" and owner == "sys") or (n.attr == "stack" and owner == "inspect"):
                out.append(_f("static.introspection", Severity.CHEAT, "introspection",
                              f"uses {_dotted(n) or n.attr}", n))
        elif isinstance(n, ast.Try):
            kernels = _kernel_call_names(tree)
            body_calls = {(_dotted(c.func).split(".")[0]) for s in n.body for c in ast.walk(s) if isinstance(c, ast.Call)}
            handler_body = [s for h in n.handlers for s in h.body]
            if (kernels & body_calls or "load_inline" in {_dotted(c.func).rsplit(".", 1)[-1] for s in n.body
                                                          for c in ast.walk(s) if isinstance(c, ast.Call)}) \
                    and _calls_torch(handler_body):
                out.append(_f("static.fallback", Severity.WARN, "no-custom-kernel",
                              "try/except around a kernel falls back to PyTorch ops", n))
    if _PRECISION_KERNEL_RE.search(strings) or _PRECISION_KERNEL_RE.search(source):
        m = _PRECISION_KERNEL_RE.search(strings) or _PRECISION_KERNEL_RE.search(source)
        out.append(Finding("static.precision", Severity.POLICY, "precision",
                           f"lower-precision construct in kernel source: {m.group(0)!r}" if m else "lower precision"))
    if _STREAM_RE.search(strings):
        out.append(Finding("static.side-stream", Severity.WARN, "side-stream",
                           f"kernel source creates or uses its own stream: {_STREAM_RE.search(strings).group(0)}"))
    if not _has_kernel(tree, source):
        out.append(Finding("static.no-kernel", Severity.CHEAT, "no-custom-kernel",
                           "no custom kernel found (no load_inline, triton.jit or other kernel compiler)"))
    return _dedupe(out)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str, Any]] = set()
    out = []
    for f in findings:
        key = (f.check, f.message, f.data.get("line"))
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


GLOBAL_FLAG_NAMES = (
    "torch.backends.cuda.matmul.allow_tf32",
    "torch.backends.cudnn.allow_tf32",
    "torch.backends.cudnn.benchmark",
    "torch.backends.cudnn.deterministic",
    "torch.backends.cudnn.enabled",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
    "torch.get_float32_matmul_precision",
    "torch.get_default_dtype",
    "torch.is_grad_enabled",
    "torch.are_deterministic_algorithms_enabled",
)


def snapshot_global_flags() -> dict[str, str]:
    """Current values of process-wide numeric switches (:data:`GLOBAL_FLAG_NAMES`), as strings."""
    import torch

    out: dict[str, str] = {}
    for name in GLOBAL_FLAG_NAMES:
        parts = name.split(".")
        obj: Any = torch
        try:
            for p in parts[1:]:
                obj = getattr(obj, p)
            out[name] = repr(obj() if callable(obj) else obj)
        except Exception as e:  # attribute missing in this torch version
            out[name] = f"<unavailable: {type(e).__name__}>"
    return out
