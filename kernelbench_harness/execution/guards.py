"""Integrity checks on candidates: static analysis of the source, and runtime checks.

Static analysis reads the candidate's AST (and the kernel source strings it carries); it never
imports the candidate. Module aliases are resolved (``import time as clock``, ``from torch.backends
import cudnn``), so a check sees ``clock.perf_counter = ...`` as ``time.perf_counter = ...``. Each
finding names its check, a severity and a verdict tag (EXPLOITS.md):

=========================  ===========  =========================================================
check                      severity     what it looks for
=========================  ===========  =========================================================
static.reference-use       cheat        the reference ``Model`` named, called or subclassed
static.no-kernel           cheat        no custom kernel at all (no load_inline / triton.jit ...)
static.fallback            warn         try/except around a kernel launch whose handler does not
                                        re-raise (the runtime launch count decides; this names the
                                        verdict's tag ``no-custom-kernel``)
static.threads             cheat        threads, processes, executors, ``os.fork``, timer signals,
                                        threads started from kernel sources (``std::thread`` ...)
static.timer-tamper        cheat        assignment / ``setattr`` to timers, comparison functions or
                                        library functions (``torch.*``, ``torch.Tensor.*`` ...)
static.global-state        cheat        process-wide backend switches (TF32, cudnn.benchmark ...)
static.tensor-subclass     cheat        ``torch.Tensor`` subclasses (``class``, ``type()``,
                                        ``_make_subclass``), ``__torch_function__`` ...
static.introspection       cheat        gc, inspect, frames, ``sys.modules``, code objects, trace
                                        hooks, ``eval`` / ``exec`` / ``compile`` / ``__import__``,
                                        ``runpy`` / ``pickle`` / ``torch.load`` / ``allow_pickle``
                                        (running code from elsewhere, e.g. the reference's file or
                                        a payload written at run time), code objects and functions
                                        built from raw parts, the harness package (in a string, in
                                        pieces, backwards), ``getattr`` / ``setattr`` with a name
                                        computed at run time on anything but ``self``, lookup builtins
                                        passed on as values or reached as attributes
                                        (``tl.core.builtins.exec``), a module's ``__dict__``, those
                                        modules reached through a library's namespace
                                        (``tl.core.inspect``), ``__getattribute__``, ctypes' reads and
                                        writes of the interpreter's memory, kernel sources that use
                                        the interpreter's C API or patch the process (``mprotect``,
                                        ``dlsym``, ``clock_gettime``, ``/proc/self``) ...
static.side-stream         warn         new CUDA streams (the timer checks what they do)
static.precision           policy       half / bfloat16 / TF32 / tensor-core fp16 math
static.subprocess          cheat        subprocess / os.system / os.exec* / os.dup2 (its processes run
                                        outside the timer and the checks)
static.network             cheat        sockets, HTTP clients
=========================  ===========  =========================================================

Runtime checks live in the worker (they need the live objects); the helpers at the end of this module
(:class:`ProtectedSnapshot`, :class:`ThreadWatch`, :func:`run_watching_precision`,
:func:`snapshot_global_flags`) snapshot and compare process-wide state inside the candidate process.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable
from typing import Any

from ..core import Finding, Severity

__all__ = [
    "GLOBAL_FLAG_NAMES",
    "KERNEL_MARKERS",
    "PRECISION_FLAG_NAMES",
    "ImportWatch",
    "ProtectedSnapshot",
    "ThreadWatch",
    "run_watching_precision",
    "snapshot_global_flags",
    "static_findings",
]

KERNEL_MARKERS = ("load_inline", "cpp_extension.load", "triton.jit", "@jit", "RawKernel", "cuda.jit",
                  "ElementwiseKernel", "numba", "tl.", "cupy", "cuda_sources", "__global__")

_THREAD_CALLS = {"Thread", "Timer", "ThreadPoolExecutor", "ProcessPoolExecutor", "Process", "Pool", "fork",
                 "start_new_thread", "_start_new_thread", "start_joinable_thread", "run_in_executor", "forkpty",
                 "spawn"}
_THREAD_OWNERS = {"threading", "_thread", "multiprocessing", "os", "concurrent", "concurrent.futures", "pty",
                  "asyncio", "torch.multiprocessing"}
_THREAD_MODULES = {"threading", "_thread", "multiprocessing", "concurrent", "concurrent.futures", "asyncio",
                   "torch.multiprocessing"}
_SIGNAL_CALLS = {"signal.signal", "signal.setitimer", "signal.alarm", "signal.set_wakeup_fd", "signal.pthread_kill",
                 "signal.raise_signal", "os.kill", "os.killpg"}
#: a module's own identity: a candidate that sets one of these poses as another module (a relative import then
#: resolves into that package)
_MODULE_IDENTITY = {"__package__", "__spec__", "__name__", "__path__", "__loader__", "__file__"}
# (``traceback`` and ``importlib`` are judged by what is used of them: printing a caught error and
# ``importlib.util.find_spec`` are honest; ``traceback.walk_stack`` and ``importlib.import_module`` are not)
_INTROSPECTION_MODULES = {"gc", "inspect", "kernelbench_harness", "__main__", "builtins",
                          "pkgutil", "pydoc",
                          "runpy", "code", "codeop", "marshal", "pickle", "dill", "cloudpickle", "shelve",
                          "jsonpickle", "joblib", "imp",
                          # they import or patch an object named by a string given at run time
                          # (``mock.patch(name)``, ``logging.config``'s resolver), or evaluate one (sympy's
                          # ``sympify`` and ``lambdify``, ``numexpr``)
                          "unittest", "mock", "sympy", "numexpr"}
# loaders that run code stored in data (pickle's ``GLOBAL``/``REDUCE``: ``builtins.eval`` with a payload the scan never
# sees, a file the candidate wrote at run time), and the constructors of code and functions from raw parts; a
# call with ``allow_pickle=`` anything but False is judged alike (``numpy.load``)
_CODE_FROM_DATA = {"torch.load", "torch.serialization", "torch.package", "pandas.read_pickle", "pandas.eval",
                   "logging.config", "yaml.load",
                   "yaml.unsafe_load", "yaml.full_load", "yaml.load_all", "yaml.unsafe_load_all", "yaml.full_load_all"}
_CODE_FROM_DATA_ATTRS = {"read_pickle", "unsafe_load", "unsafe_load_all", "Unpickler", "PackageImporter",
                         "CodeType", "FunctionType", "LambdaType", "gi_code", "cr_code", "ag_code", "co_code",
                         # strings evaluated or resolved to objects: forward references, format fields, names
                         "get_type_hints", "get_field", "resolve_name", "sympify", "lambdify", "parse_expr",
                         "__annotations__"}
_INTROSPECTION_ATTRS = {"_getframe", "getframe", "walk_stack", "walk_tb", "f_back", "f_globals", "f_locals", "f_code", "get_objects",
                        "get_referrers", "get_referents", "settrace", "setprofile", "addaudithook",
                        "__subclasses__", "__globals__", "gi_frame", "cr_frame", "tb_frame", "__builtins__",
                        "__code__", "__closure__", "cell_contents", "currentframe", "__traceback__", "tb_next",
                        "ag_frame", "f_trace",
                        # the import system's finders (the worker's import watch sits first on sys.meta_path)
                        "meta_path", "path_hooks", "path_importer_cache",
                        # the profiler's state: a candidate that reads it can act differently in the profiled call
                        # (the custom-kernel share, kernelshare.py, and the launch check are read from that call)
                        "_profiler_enabled", "_is_profiler_enabled", "_get_current_profiler"}
# ctypes' ways into the process's own memory: an address read or written, the interpreter's C API (a stop-39 attack
# swapped the C function behind ``time.perf_counter_ns`` so; the Python object stayed the same). An object's address
# computed with (``ctypes.cast(id(f) + 16, ...)``) is judged apart. Calling a library of one's own through ``CDLL``
# with a tensor's ``data_ptr()`` stays allowed.
_CTYPES_MEMORY = {"pythonapi", "PyDLL", "pydll", "py_object", "memmove", "memset", "from_address", "string_at",
                  "wstring_at", "PYFUNCTYPE"}
# a kernel's C/C++ source that reaches the interpreter's objects (modules, their functions' C pointers) rather than
# tensors: the generated binding never needs these
_KERNEL_PYAPI_RE = re.compile(r"\b(PyImport_\w+|PySys_GetObject|PyObject_(?:Get|Set)Attr\w*|PyModule_GetDict|"
                              r"PyEval_GetGlobals|PyEval_GetBuiltins|ml_meth|m_ml|PyCFunction_\w+|"
                              r"PyThreadState_\w+|_PyRuntime|PyInterpreterState_\w+)\b|"
                              # pybind11's import of a module whose objects the harness relies on (``warnings``,
                              # ``torch`` stay allowed)
                              r"module_?::import\s*\(\s*\"(?:time|sys|os|gc|builtins|importlib|threading|_thread|"
                              r"ctypes|statistics|math|json|socket|signal|inspect|kernelbench\w*|torch\.cuda\w*)\b")
# a kernel's C/C++ source that rewrites or maps the process itself: page protections, the loader's tables, the
# clocks' C functions (a stop-40 attack pointed libpython's table slot for clock_gettime at a clock 5x slow)
_KERNEL_PROCESS_RE = re.compile(r"\b(mprotect|dlsym|dlopen|dl_iterate_phdr|dladdr|RTLD_\w+|link_map|"
                                r"_GLOBAL_OFFSET_TABLE_|process_vm_writev|ptrace|clock_gettime|gettimeofday|"
                                r"__attribute__\s*\(\(\s*constructor|syscall)\b|/proc/self/|/proc/\d+/")
# of _CTYPES_MEMORY, the ones no other library spells alike (``X.from_address`` is ctypes' whatever X is)
_CTYPES_ANY_OWNER = {"from_address", "pythonapi", "PYFUNCTYPE", "PyDLL"}
# the interpreter's last uncaught error on ``sys``, and with it the frames it ran through (the error being handled,
# ``sys.exc_info()``, is honest error handling's)
_EXCEPTION_STATE = {"last_traceback", "last_exc"}
# modules whose attributes a name may be bound to (``s = os.sys``) without an import naming it
_MODULE_ROOTS = {"os", "sys", "torch", "time", "threading", "ctypes", "builtins", "numpy", "triton", "gc", "inspect"}
# a computed attribute name whose constant parts begin like these reaches frames or code objects
_INTROSPECTION_PREFIXES = ("tb_", "f_", "gi_", "cr_", "ag_")
_DUNDER_PREFIXES = ("__torch_", "__class__", "__dict__", "__closure", "__code", "__globals", "__traceback",
                    "__subclasses", "__builtins")
_INTROSPECTION_BUILTINS = {"globals", "__import__", "eval", "exec", "compile", "breakpoint"}
# builtins that look up or set attributes by a name given at run time: passed on as a value (``reduce(getattr, ...)``,
# ``g = getattr``) the call that uses them is hidden from this scan
_LOOKUP_BUILTINS = {"getattr", "setattr", "delattr", "vars", "globals", "locals", "__import__", "eval", "exec"}
# the lookup builtins and ``code``'s interpreters as attributes of another object (``B.exec`` with ``B`` builtins reached
# through a library's namespace); ``eval`` and ``compile`` are left out (``model.eval()``, ``torch.compile``)
_LOOKUP_ATTRS = {"getattr", "setattr", "delattr", "vars", "globals", "locals", "exec", "breakpoint",
                 "InteractiveInterpreter", "InteractiveConsole", "interact", "compile_command"}
# processes and file descriptors: a module or call reached as another's attribute
_PROCESS_ATTRS = {"subprocess", "pty", "Popen", "multiprocessing", "dup2", "dup3", "forkpty", "posix_spawn",
                  "posix_spawnp", "prctl"}
# importlib's names an honest candidate uses (is a package installed?); any other is an import by a run-time name
_IMPORTLIB_ALLOWED = {"importlib", "importlib.util", "importlib.util.find_spec", "importlib.metadata",
                      "importlib.metadata.version"}
# getattr / vars / __dict__ with a computed name on these is a lookup hidden from this scan
_SENSITIVE_OWNERS = {"sys", "builtins", "__builtins__", "time", "os", "gc", "threading", "_thread", "importlib",
                     "torch.backends", "torch.cuda", "torch.cuda.Event", "ctypes", "signal",
                     # the profiler's state under a computed name (the custom-kernel share's profiled call)
                     "torch.autograd", "torch.autograd.profiler", "torch.profiler", "torch._C", "torch._C._autograd"}
# the same modules reached as attributes of another (``torch.sys``, ``numpy.os``)
_SENSITIVE_LEAVES = {"sys", "builtins", "__builtins__", "os", "gc", "threading", "_thread", "importlib", "ctypes",
                     "signal", "inspect"}
_TIMER_NAMES = {"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns",
                "process_time", "process_time_ns", "thread_time", "sleep", "elapsed_time", "Event", "synchronize",
                "record", "query", "allclose", "isclose", "equal", "assert_close", "assert_allclose", "testing",
                "do_bench", "max", "abs", "all", "any", "__eq__", "__sub__", "profile"}
_CLOCK_NAMES = {"perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time_ns", "process_time",
                "process_time_ns", "thread_time", "thread_time_ns", "elapsed_time", "clock_gettime",
                "clock_gettime_ns"}
_TIMER_OWNERS = {"time", "torch", "torch.cuda", "torch.cuda.Event", "torch.testing", "numpy", "torch.Tensor",
                 "triton.testing", "math", "builtins", "torch.profiler", "torch.autograd.profiler", "json"}
_LIBRARY_OWNERS = ("torch", "numpy", "triton", "time", "json", "socket", "builtins", "math", "threading")
_GLOBAL_FLAG_FUNCS = {"set_float32_matmul_precision", "set_default_dtype", "set_flush_denormal",
                      "use_deterministic_algorithms", "set_default_tensor_type", "set_num_threads",
                      "set_default_device", "set_per_process_memory_fraction", "set_rng_state",
                      "set_num_interop_threads", "enable_flash_sdp", "enable_math_sdp", "enable_mem_efficient_sdp",
                      "allow_fp16_bf16_reduction_math_sdp"}
_GLOBAL_FLAG_ATTRS = {"allow_tf32", "benchmark", "deterministic", "allow_fp16_reduced_precision_reduction",
                      "allow_bf16_reduced_precision_reduction", "allow_fp16_accumulation", "fp32_precision",
                      "benchmark_limit"}
_PRECISION_OFF = {"allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction",
                  "allow_fp16_accumulation"}
_LOW_DTYPES = ("float16", "bfloat16", "half", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
_PRECISION_ATTRS = {"half", "bfloat16", "float16", "bf16", "fp16"}
_PRECISION_KERNEL_RE = re.compile(r"\b(__half2?|__nv_bfloat162?|half2|__float2half|__half2float|__float2bfloat16|"
                                  r"wmma::|mma\.sync[^\n]*f16|tl\.float16|tl\.bfloat16|hmma|__hadd|__hmul|"
                                  r"input_precision\s*=\s*[\"'](tf32|tf32x3)|allow_tf32\s*=\s*True)\b")
_STREAM_RE = re.compile(r"\b(cudaStreamCreate\w*|getStreamFromPool|cudaStreamNonBlocking|cudaLaunchHostFunc)\b")
_KERNEL_THREAD_RE = re.compile(r"(\bstd::thread\b|\bstd::jthread\b|\bpthread_create\b|\bstd::async\b)")
_NETWORK_MODULES = {"socket", "urllib", "urllib.request", "http", "http.client", "requests", "httpx", "aiohttp",
                    "ftplib", "smtplib", "ssl"}


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for an attribute chain / name (``k[grid]`` reads as ``k``), else ''."""
    parts: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript) and not parts:
            node = node.value  # kernel[grid](...) launches kernel
        else:
            break
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _import_names(tree: ast.AST) -> set[str]:
    """Names bound by the source's import statements."""
    return {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in n.names}


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> the module or object it names (``import torch.cuda as tc`` gives tc -> torch.cuda)."""
    out: dict[str, str] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.asname:
                    out[a.asname] = a.name
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            for a in n.names:
                if a.name != "*":
                    out[a.asname or a.name] = f"{n.module}.{a.name}"
    # a name bound to an imported module's attribute (``s = os.sys``; a stop-39 attack looked up the harness's
    # modules through such a name): the first binding, resolved through the imports
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and \
                isinstance(n.value, (ast.Name, ast.Attribute)) and n.targets[0].id not in out:
            src = _dotted(n.value)
            head, _, rest = src.partition(".")
            if head in out and head != n.targets[0].id:
                out[n.targets[0].id] = f"{out[head]}.{rest}" if rest else out[head]
            elif head in _MODULE_ROOTS and rest:
                out[n.targets[0].id] = src
    return out


class _Names:
    """Canonical dotted names: aliases resolved, ``import torch.backends.cudnn as x`` and friends."""

    def __init__(self, tree: ast.AST) -> None:
        self.aliases = _aliases(tree)
        #: names that alias by assignment, not by import
        self.assigned = {n.targets[0].id for n in ast.walk(tree) if isinstance(n, ast.Assign) and
                         len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)} - _import_names(tree)

    def __call__(self, node: ast.AST) -> str:
        return self.canon(_dotted(node))

    def canon(self, name: str) -> str:
        if not name:
            return ""
        head, _, rest = name.partition(".")
        target = self.aliases.get(head)
        if target is None:
            return name
        return f"{target}.{rest}" if rest else target


def _f(check: str, sev: Severity, tag: str, msg: str, node: ast.AST | None = None, **data: Any) -> Finding:
    if node is not None and hasattr(node, "lineno"):
        data.setdefault("line", node.lineno)
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
    """Names whose call launches a custom kernel: extensions bound from load_inline / load, jitted
    kernels, and (two levels deep) functions and methods whose bodies call one of those."""
    names: set[str] = set()
    funcs: dict[str, ast.AST] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
            fn = _dotted(n.value.func)
            if fn.endswith(("load_inline", "load", "RawKernel", "RawModule")):
                for t in n.targets:
                    if isinstance(t, (ast.Name, ast.Attribute)):
                        names.add(_dotted(t).split(".")[-1])
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            funcs[n.name] = n
            for d in n.decorator_list:
                dn = _dotted(d.func if isinstance(d, ast.Call) else d)
                if dn.endswith(("jit", "autotune", "heuristics")):
                    names.add(n.name)
    for _ in range(2):
        for fname, fnode in funcs.items():
            if fname not in names and _launches(fnode, names):
                names.add(fname)
    return names


def _launches(node: ast.AST, kernels: set[str]) -> bool:
    """True when ``node`` calls something in ``kernels`` (by name, ``self.name`` or ``ext.fn``)."""
    for c in ast.walk(node):
        if isinstance(c, ast.Call):
            parts = _dotted(c.func).split(".")
            if parts[0] in kernels or (parts[0] == "self" and len(parts) > 1 and parts[1] in kernels):
                return True
    return False


def _reraises(handler: ast.ExceptHandler) -> bool:
    return bool(handler.body) and isinstance(handler.body[-1], ast.Raise)


class _ConstantLookups(ast.NodeTransformer):
    """Reads ``getattr(x, "name")`` (a default, ``builtins.getattr``, ``object.__getattribute__`` too) as
    ``x.name``, and ``operator.attrgetter("a.b")(x)`` as ``x.a.b``, so that every rule on attributes judges
    them: a stop-39 attack reached the harness's modules by ``getattr(os.sys, "modules")``, which the
    ``.modules`` rule did not see."""

    _GETATTR = {"getattr", "builtins.getattr", "object.__getattribute__", "type.__getattribute__"}

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        name = _dotted(node.func)
        if name in self._GETATTR and len(node.args) in (2, 3) and not node.keywords:
            attr = node.args[1]
            if isinstance(attr, ast.Constant) and isinstance(attr.value, str) and attr.value.isidentifier():
                return ast.copy_location(ast.Attribute(value=node.args[0], attr=attr.value, ctx=ast.Load()), node)
        if isinstance(node.func, ast.Call) and _dotted(node.func.func) in ("attrgetter", "operator.attrgetter") \
                and len(node.args) == 1 and len(node.func.args) == 1 and not node.func.keywords:
            path = node.func.args[0]
            if isinstance(path, ast.Constant) and isinstance(path.value, str) and \
                    all(p.isidentifier() for p in path.value.split(".")):
                out: ast.expr = node.args[0]
                for p in path.value.split("."):
                    out = ast.copy_location(ast.Attribute(value=out, attr=p, ctx=ast.Load()), node)
                return out
        return node


def static_findings(source: str) -> list[Finding]:
    """Static integrity findings for candidate ``source`` (see the module docstring's table).

    A source that does not parse gives one ``static.syntax`` finding (severity info); the build
    then reports the compile error.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return [Finding("static.syntax", Severity.INFO, "", f"syntax error at line {e.lineno}: {e.msg}")]
    tree = ast.fix_missing_locations(_ConstantLookups().visit(tree))
    out: list[Finding] = []
    strings = _string_constants(tree)
    canon = _Names(tree)
    kernels = _kernel_call_names(tree)
    called = {id(c.func) for c in ast.walk(tree) if isinstance(c, ast.Call)}  # ``x.modules()`` is a method call
    # ``(c_float * n).from_address(t.data_ptr())``: a view of a tensor's own memory, not the interpreter's
    # (``ctypes.memmove(dst.data_ptr(), src.data_ptr(), n)`` likewise copies between tensors)
    tensor_views = {id(c.func) for c in ast.walk(tree) if isinstance(c, ast.Call) and c.args and
                    all(isinstance(a, ast.Call) and isinstance(a.func, ast.Attribute) and a.func.attr == "data_ptr"
                        for a in c.args[:2 if _dotted(c.func).endswith("memmove") else 1])}
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    # names that only ever take constant, public attribute names (``for name in ("float32", "float64")``)
    fixed_names = _names_over_constants(tree)
    # names bound to modules (imports, and names assigned from them): a module's ``__dict__`` is its namespace by name
    module_names = _import_names(tree) | set(canon.aliases)
    # names that hold an object's address (``addr = id(f)``)
    addresses = {t.id for a in ast.walk(tree) if isinstance(a, ast.Assign) and isinstance(a.value, ast.Call) and
                 isinstance(a.value.func, ast.Name) and a.value.func.id == "id" for t in a.targets
                 if isinstance(t, ast.Name)}

    # imports; K-19: the reference, by name or as a base class
    for n in ast.walk(tree):
        if isinstance(n, ast.ClassDef):
            for b in n.bases:
                if _dotted(b) in ("Model",) or _dotted(b).endswith(".Model"):
                    out.append(_f("static.reference-use", Severity.CHEAT, "no-custom-kernel",
                                  f"class {n.name} subclasses the reference Model", n))
        elif isinstance(n, ast.Name) and n.id == "Model" and isinstance(n.ctx, ast.Load):
            out.append(_f("static.reference-use", Severity.CHEAT, "no-custom-kernel", "uses the reference Model", n))
        elif isinstance(n, ast.Name) and n.id in _LOOKUP_BUILTINS and isinstance(n.ctx, ast.Load) and \
                not (isinstance(parents.get(id(n)), ast.Call) and parents[id(n)].func is n) and \
                n.id not in canon.aliases:
            out.append(_f("static.introspection", Severity.CHEAT, "introspection",
                          f"passes {n.id} on as a value (the call that uses it is hidden from this scan)", n))
        elif isinstance(n, ast.Constant) and n.value in ("__getattribute__", "__getattr__", "__dict__", "__globals__",
                                                           "__builtins__", "__import__"):
            out.append(_f("static.introspection", Severity.CHEAT, "introspection", f"names {n.value} in a string", n))
        elif isinstance(n, ast.Name) and n.id == "__builtins__":
            out.append(_f("static.introspection", Severity.CHEAT, "introspection", "uses __builtins__", n))
        elif isinstance(n, ast.ImportFrom) and n.level:
            # a candidate is one file, not a package: a relative import fails (an honest fallback may try one) unless
            # the candidate set its __package__ (a cheat, below), into the harness's modules beside the worker (one
            # reached the worker's job object that way: tests/exploits/candidates/k14_relative_import_send.py)
            out.append(_f("static.introspection", Severity.WARN, "introspection",
                          f"relative import from {'.' * n.level}{n.module or ''}", n))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and "kernelbench_harness" in n.value:
            # the harness's modules named in a string (pkgutil.resolve_name, pydoc.locate, __import__ by name)
            out.append(_f("static.introspection", Severity.CHEAT, "introspection", "names the harness's package", n))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and "profiler_enabled" in n.value:
            # the profiler's state looked up by name (getattr(torch.autograd, "_profiler_enabled"))
            out.append(_f("static.introspection", Severity.CHEAT, "introspection",
                          "names the profiler's state in a string", n))
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            if isinstance(n, ast.Import):
                mods = [a.name for a in n.names]
            else:
                mods = [n.module or ""] + [f"{n.module}.{a.name}" for a in n.names if n.module]
            for m in mods:
                root = m.split(".")[0]
                leaf = m.rsplit(".", 1)[-1]
                if isinstance(n, ast.ImportFrom) and m != (n.module or "") and (
                        _hidden_attr(n.module or "", leaf) or (leaf in _LOOKUP_BUILTINS and n.module == "builtins")):
                    out.append(_f("static.introspection", Severity.CHEAT, "introspection", f"imports {m}", n))
                if root == "importlib" and m not in _IMPORTLIB_ALLOWED:
                    out.append(_f("static.introspection", Severity.CHEAT, "introspection",
                                  f"imports {m} (a module imported by a name given at run time)", n))
                if root in _THREAD_MODULES or m in _THREAD_MODULES:
                    out.append(_f("static.threads", Severity.CHEAT, "deferred-work", f"imports {m}", n))
                if root in _INTROSPECTION_MODULES or leaf in _CODE_FROM_DATA_ATTRS or any(
                        m == d or m.startswith(d + ".") for d in _CODE_FROM_DATA):
                    out.append(_f("static.introspection", Severity.CHEAT, "introspection", f"imports {m}", n))
                if root in _NETWORK_MODULES or m in _NETWORK_MODULES:
                    out.append(_f("static.network", Severity.CHEAT, "network", f"imports {m}", n))
                if root in ("subprocess", "pty"):
                    out.append(_f("static.subprocess", Severity.CHEAT, "deferred-work", f"imports {m}", n))
                if root == "ctypes":
                    out.append(_f("static.introspection", Severity.WARN, "ctypes", "imports ctypes", n))
                    if m.rsplit(".", 1)[-1] in _CTYPES_MEMORY:
                        out.append(_f("static.introspection", Severity.CHEAT, "introspection",
                                      f"imports {m}: it reads or writes the interpreter's own memory", n))
    # the module's own statements (in top-level if / try / with blocks too, not in functions or classes): where
    # setting __package__ and kin poses as another module
    module_level: set[ast.AST] = set()
    todo = list(tree.body) if isinstance(tree, ast.Module) else []
    while todo:
        st = todo.pop()
        module_level.add(st)
        if not isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                for sub in getattr(st, field, []) or []:
                    todo.extend([sub] if not isinstance(sub, ast.ExceptHandler) else sub.body)
    # calls, assignments, attributes, try/except
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            raw = _dotted(n.func)
            name = canon.canon(raw)
            last = name.rsplit(".", 1)[-1]
            owner = name.rpartition(".")[0]
            if last in _THREAD_CALLS and (owner.split(".")[0] in _THREAD_OWNERS or owner in _THREAD_OWNERS or
                                          last in {"Thread", "ThreadPoolExecutor", "ProcessPoolExecutor"}):
                out.append(_f("static.threads", Severity.CHEAT, "deferred-work", f"calls {name}()", n))
            if name in _SIGNAL_CALLS:
                out.append(_f("static.threads", Severity.CHEAT, "deferred-work",
                              f"calls {name}() (work triggered after forward returns)", n))
            if name.startswith("subprocess.") or (owner == "os" and (
                    last in ("system", "popen", "posix_spawn", "posix_spawnp", "forkpty") or
                    last.startswith(("exec", "spawn")))):
                # a process of the candidate's runs outside the timer and every check in its own process (a review
                # relayed the channel through one and forged its times; another filled outputs after forward returned)
                out.append(_f("static.subprocess", Severity.CHEAT, "deferred-work", f"calls {name}()", n))
            if last in _GLOBAL_FLAG_FUNCS and name.startswith(("torch", "cuda")):
                out.append(_f("static.global-state", Severity.CHEAT, "global-state", f"calls {name}()", n))
            if raw in ("setattr", "builtins.setattr", "object.__setattr__") and n.args:
                tgt = canon(n.args[0])
                a1 = n.args[1] if len(n.args) > 1 else None
                attr = a1.value if isinstance(a1, ast.Constant) else None
                if attr in ("__class__", "__torch_function__", "__torch_dispatch__"):
                    out.append(_f("static.tensor-subclass", Severity.CHEAT, "non-plain-tensor",
                                  f"setattr(..., {attr!r}, ...)", n))
                elif tgt.startswith("torch.backends"):
                    out.append(_f("static.global-state", Severity.CHEAT, "global-state",
                                  f"setattr on {tgt}.{attr if attr is not None else '<computed>'}", n))
                elif tgt in _TIMER_OWNERS or str(attr) in _TIMER_NAMES or \
                        (attr is None and tgt.split(".")[0] in _LIBRARY_OWNERS):
                    out.append(_f("static.timer-tamper", Severity.CHEAT, "timer-tamper",
                                  f"setattr on {tgt or '<expression>'}.{attr if attr is not None else '<computed>'}", n))
            if raw in ("getattr", "vars") and n.args:
                tgt = canon(n.args[0])
                computed = raw == "vars" or (len(n.args) > 1 and not isinstance(n.args[1], ast.Constant))
                if computed and (tgt in _SENSITIVE_OWNERS or tgt.rsplit(".", 1)[-1] in _SENSITIVE_LEAVES):
                    out.append(_f("static.introspection", Severity.CHEAT, "introspection",
                                  f"{raw}() with a computed name on {tgt}", n))
            if name in ("getattr", "setattr", "delattr", "builtins.getattr", "builtins.setattr", "builtins.delattr",
                        "object.__setattr__", "object.__delattr__") and len(n.args) > 1 and \
                    not isinstance(n.args[1], ast.Constant) and not (isinstance(n.args[0], ast.Name) and
                                                                     n.args[0].id in ("self", "cls")) and \
                    not (isinstance(n.args[1], ast.Name) and n.args[1].id in fixed_names):
                # a name given at run time, on anything but the candidate's own object: the scan cannot tell what
                # it reaches (a stop-40 attack spelled "modules" with chr() inside a two-line getattr helper)
                out.append(_f("static.introspection", Severity.CHEAT, "introspection",
                              f"{raw}() with a name computed at run time on {canon(n.args[0]) or 'an expression'}",
                              n))
            if raw == "vars" and n.args and not (isinstance(n.args[0], ast.Name) and n.args[0].id == "self"):
                out.append(_f("static.introspection", Severity.CHEAT, "introspection",
                              f"vars() of {canon(n.args[0]) or 'an expression'}", n))
            if raw in ("getattr", "setattr", "hasattr", "delattr", "builtins.getattr", "builtins.setattr",
                       "object.__setattr__", "object.__getattribute__") and len(n.args) > 1 and \
                    not isinstance(n.args[1], ast.Constant):
                # a name assembled from pieces ("tb_" + "frame"): judged by what the pieces spell
                folded, pieces = _fold_str(n.args[1])
                if folded is not None:
                    hidden = folded if folded in _INTROSPECTION_ATTRS or folded == "modules" or \
                        folded.startswith(_DUNDER_PREFIXES) else None
                else:  # a piece that begins such a name beyond its bare prefix ("f_lo" + x, "__torch_" + x)
                    hidden = next((p for p in pieces if p.startswith(_DUNDER_PREFIXES) or any(
                        a.startswith(p) and len(p) > len(q) for a in _INTROSPECTION_ATTRS
                        for q in _INTROSPECTION_PREFIXES if p.startswith(q))), None)
                if hidden is not None:
                    tag = "non-plain-tensor" if hidden.startswith(("__torch_", "__class__")) else "introspection"
                    out.append(_f("static.introspection" if tag == "introspection" else "static.tensor-subclass",
                                  Severity.CHEAT, tag, f"{raw}() with an assembled name {hidden!r}", n))
            if raw == "type" and len(n.args) == 3:
                bases = ast.unparse(n.args[1]) if hasattr(ast, "unparse") else ""
                if "Tensor" in bases or "Mode" in bases or not isinstance(n.args[1], ast.Tuple):
                    out.append(_f("static.tensor-subclass", Severity.CHEAT, "non-plain-tensor",
                                  f"creates a class with type() from {bases[:60]}", n))
            if last in ("_make_subclass", "_make_wrapper_subclass", "as_subclass"):
                out.append(_f("static.tensor-subclass", Severity.CHEAT, "non-plain-tensor", f"calls {name}()", n))
            if raw in _INTROSPECTION_BUILTINS and raw not in canon.aliases and not (raw == "globals" and
                                                                                 _own_name_test(n, parents)):
                out.append(_f("static.introspection", Severity.CHEAT, "introspection", f"calls {raw}()", n))
            if last == "Stream" and name.startswith(("torch.cuda", "cuda", "torch")):
                out.append(_f("static.side-stream", Severity.WARN, "side-stream", f"creates a stream: {name}()", n))
            if last in _PRECISION_ATTRS and isinstance(n.func, ast.Attribute):
                out.append(_f("static.precision", Severity.POLICY, "precision", f"casts with .{last}()", n))
            if last in ("to", "type") and any(_dotted(a).endswith(_LOW_DTYPES) for a in n.args):
                out.append(_f("static.precision", Severity.POLICY, "precision", "casts to lower precision", n))
            if any(k.arg == "dtype" and _dotted(k.value).endswith(_LOW_DTYPES) for k in n.keywords):
                out.append(_f("static.precision", Severity.POLICY, "precision",
                              f"{name or 'a call'}(dtype=lower precision)", n))
            if last == "autocast":
                out.append(_f("static.precision", Severity.POLICY, "precision", "uses autocast", n))
        elif isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                for tt in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                    # rebinding a name bound by assignment (``s = os.sys``) changes no library object
                    _check_store("" if isinstance(tt, ast.Name) and tt.id in canon.assigned else canon(tt), n, out)
                    if isinstance(tt, ast.Name) and tt.id in _MODULE_IDENTITY and n in module_level:
                        # what the module's relative imports and pickling resolve against: set, it reaches other
                        # packages' modules (the harness's own) without importing them by name
                        out.append(_f("static.introspection", Severity.CHEAT, "introspection", f"sets {tt.id}", n))
        elif isinstance(n, ast.Delete):
            for t in n.targets:
                name = canon(t)
                if "." in name and name.split(".")[0] in _LIBRARY_OWNERS:
                    out.append(_f("static.timer-tamper", Severity.CHEAT, "timer-tamper", f"deletes {name}", n))
        elif isinstance(n, ast.ClassDef):
            for b in n.bases:
                bn = canon(b)
                if bn in ("torch.Tensor", "Tensor", "torch.nn.Parameter") or bn.endswith("._C.TensorBase") or \
                        bn == "TensorBase":
                    out.append(_f("static.tensor-subclass", Severity.CHEAT, "non-plain-tensor",
                                  f"class {n.name} subclasses {bn}", n))
            for b in n.bases:
                if canon(b).rsplit(".", 1)[-1] in ("TorchFunctionMode", "TorchDispatchMode"):
                    out.append(_f("static.tensor-subclass", Severity.CHEAT, "non-plain-tensor",
                                  f"class {n.name} is a torch {canon(b).rsplit('.', 1)[-1]}", n))
            for item in n.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in (
                        "__torch_function__", "__torch_dispatch__"):
                    out.append(_f("static.tensor-subclass", Severity.CHEAT, "non-plain-tensor",
                                  f"class {n.name} defines {item.name}", item))
                elif isinstance(item, (ast.Assign, ast.AnnAssign)) and any(
                        isinstance(t, ast.Name) and t.id in ("__torch_function__", "__torch_dispatch__")
                        for t in (item.targets if isinstance(item, ast.Assign) else [item.target])):
                    out.append(_f("static.tensor-subclass", Severity.CHEAT, "non-plain-tensor",
                                  f"class {n.name} assigns __torch_function__ / __torch_dispatch__", item))
        elif isinstance(n, ast.Constant) and n.value in ("__torch_function__", "__torch_dispatch__"):
            # the name as a string (a class made with type(), a setattr): only a tensor subclass or a mode uses it
            out.append(_f("static.tensor-subclass", Severity.CHEAT, "non-plain-tensor",
                          f"names {n.value} in a string", n))
        elif isinstance(n, ast.Attribute):
            owner = canon(n.value)
            if n.attr == "ctypes" and owner:  # ctypes reached as another module's attribute (torch.ctypes)
                out.append(_f("static.introspection", Severity.WARN, "ctypes", f"uses {owner}.ctypes", n))
            dotted = canon(n)
            in_importlib = dotted.startswith("importlib.") and not any(
                dotted == a or a.startswith(dotted + ".") for a in _IMPORTLIB_ALLOWED)
            getattribute = n.attr in ("__getattribute__", "__getattr__") and not (
                isinstance(n.value, ast.Call) and _dotted(n.value.func) == "super")
            if owner and owner != "self" and n.attr in ("socket", "socketserver"):  # reached as another's attribute
                out.append(_f("static.network", Severity.CHEAT, "network", f"uses {_dotted(n) or n.attr}", n))
            if owner and owner != "subprocess" and n.attr in _PROCESS_ATTRS:
                # a process started, or a file descriptor replaced, through a name the import rules never see
                # (``torch.utils.cpp_extension.subprocess.Popen``, ``os.dup2`` over the channel's socket)
                out.append(_f("static.subprocess", Severity.CHEAT, "deferred-work", f"uses {_dotted(n) or n.attr}", n))
            if owner and (n.attr in _INTROSPECTION_MODULES - {"code"} or n.attr in _LOOKUP_ATTRS or (
                    n.attr == "__dict__" and (_dotted(n.value).partition(".")[0] in module_names or
                                              _dotted(n.value) not in ("self", "cls")))):
                # a module the scan refuses to import, or a lookup builtin, reached as another module's attribute
                # (``triton.language.core.builtins.eval``, ``X.inspect.stack()``), or a module's namespace by name
                # (``tl.core.__dict__["builtins"]``): the import and name rules never see these
                out.append(_f("static.introspection", Severity.CHEAT, "introspection",
                              f"uses {_dotted(n) or n.attr}", n))
            if n.attr in _CODE_FROM_DATA_ATTRS or any(dotted == d or dotted.startswith(d + ".")
                                                      for d in _CODE_FROM_DATA):
                out.append(_f("static.introspection", Severity.CHEAT, "introspection",
                              f"uses {dotted or n.attr}: it runs code, or finds objects by name, from data the scan "
                              "cannot read", n))
            if n.attr == "importlib" or in_importlib or getattribute:
                # a module imported by a name the scan does not see (torch.utils.cpp_extension.importlib)
                out.append(_f("static.introspection", Severity.CHEAT, "introspection", f"uses {_dotted(n) or n.attr}",
                              n))
            if n.attr in _CTYPES_MEMORY and ("ctypes" in owner.split(".") or n.attr in _CTYPES_ANY_OWNER) and \
                    not (n.attr in ("from_address", "memmove", "memset") and id(n) in tensor_views):
                out.append(_f("static.introspection", Severity.CHEAT, "introspection",
                              f"uses {_dotted(n) or n.attr}: it reads or writes the interpreter's own memory (a "
                              "timer's C function can be swapped so)", n))
            if _hidden_attr(owner, n.attr) or (n.attr == "modules" and id(n) not in called and not owner.startswith(
                    ("torch.nn", "nn", "torch.ao", "self"))) or \
                    (n.attr == "stack" and owner == "inspect") or \
                    (n.attr == "__dict__" and (owner in _SENSITIVE_OWNERS or
                                               owner.rsplit(".", 1)[-1] in _SENSITIVE_LEAVES)):
                out.append(_f("static.introspection", Severity.CHEAT, "introspection",
                              f"uses {_dotted(n) or n.attr}", n))
        elif isinstance(n, ast.Try):
            builds = any(isinstance(c, ast.Call) and _dotted(c.func).endswith(("load_inline", "cpp_extension.load"))
                         for st in n.body for c in ast.walk(st))
            if (builds or any(_launches(st, kernels) for st in n.body)) and any(not _reraises(h) for h in n.handlers):
                out.append(_f("static.fallback", Severity.WARN, "no-custom-kernel",
                              "try/except around a kernel build or launch whose handler does not re-raise (a fallback)", n))
    if _PRECISION_KERNEL_RE.search(strings) or _PRECISION_KERNEL_RE.search(source):
        m = _PRECISION_KERNEL_RE.search(strings) or _PRECISION_KERNEL_RE.search(source)
        out.append(Finding("static.precision", Severity.POLICY, "precision",
                           f"lower-precision construct in kernel source: {m.group(0)!r}" if m else "lower precision"))
    if _STREAM_RE.search(strings):
        out.append(Finding("static.side-stream", Severity.WARN, "side-stream",
                           f"kernel source creates or uses its own stream: {_STREAM_RE.search(strings).group(0)}"))
    m = _KERNEL_PYAPI_RE.search(strings)
    if m:
        out.append(Finding("static.introspection", Severity.CHEAT, "introspection",
                           f"kernel source reaches the interpreter's objects: {m.group(0)!r}"))
    m = _KERNEL_PROCESS_RE.search(strings)
    if m:
        out.append(Finding("static.introspection", Severity.CHEAT, "introspection",
                           f"kernel source rewrites or inspects its own process: {m.group(0)!r}"))
    named_proc = False
    for n in ast.walk(tree):
        # a process's files under /proc (its own memory among them: a review read the channel's key there, with the
        # pid put in at run time), reported once; what the machine is (cpuinfo, meminfo) stays allowed
        text = n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) else None
        if not named_proc and text is not None and (text.rstrip("/") == "/proc" or (
                text.startswith("/proc/") and not text.startswith(("/proc/cpuinfo", "/proc/meminfo")))):
            named_proc = True
            out.append(_f("static.introspection", Severity.CHEAT, "introspection",
                          f"names a process's files under /proc ({text[:40]!r})", n))
        elif isinstance(n, ast.Call) and any(k.arg == "allow_pickle" and not (
                isinstance(k.value, ast.Constant) and k.value.value is False) for k in n.keywords):
            out.append(_f("static.introspection", Severity.CHEAT, "introspection",
                          f"calls {canon(n.func) or 'a loader'} with allow_pickle: it runs code stored in data", n))
    for n in ast.walk(tree):
        # an object's address as a number to compute with or to hand to ctypes (``ctypes.cast(id(f) + 16, ...)``);
        # id() as a dictionary key is an honest cache
        if isinstance(n, ast.BinOp) or (isinstance(n, ast.Call) and _ctypes_call(canon(n.func))):
            operands = [n.left, n.right] if isinstance(n, ast.BinOp) else list(n.args)
            if any((isinstance(a, ast.Call) and isinstance(a.func, ast.Name) and a.func.id == "id") or
                   (isinstance(a, ast.Name) and a.id in addresses) for a in operands):
                out.append(_f("static.introspection", Severity.CHEAT, "introspection",
                              "computes with an object's address (id()): it reads or writes the interpreter's own "
                              "memory", n))
                break
    for n in ast.walk(tree):
        folded = _fold_str(n)[0] if isinstance(n, (ast.BinOp, ast.JoinedStr, ast.Call)) else None
        if folded is not None and not isinstance(n, ast.Constant) and _names_harness(folded):
            out.append(_f("static.introspection", Severity.CHEAT, "introspection",
                          "names the harness's package in a string put together from pieces", n))
            break
    m = _KERNEL_THREAD_RE.search(strings)
    if m:
        out.append(Finding("static.threads", Severity.CHEAT, "deferred-work",
                           f"kernel source starts a host thread: {m.group(0)!r}"))
    if not _has_kernel(tree, source):
        out.append(Finding("static.no-kernel", Severity.CHEAT, "no-custom-kernel",
                           "no custom kernel found (no load_inline, triton.jit or other kernel compiler)"))
    return _dedupe(out)


def _hidden_attr(owner: str, attr: str) -> bool:
    """``owner.attr`` (or ``from owner import attr``) reaches what the scan cannot follow: frames, code objects,
    ``sys.modules``, the interpreter's last uncaught error, or an import by a name given at run time."""
    on_sys = owner.rsplit(".", 1)[-1] == "sys"
    return attr in _INTROSPECTION_ATTRS or "import" in attr.lower() or (on_sys and attr in ("modules",
                                                                                           *_EXCEPTION_STATE))


def _names_over_constants(tree: ast.AST) -> set[str]:
    """Loop names (``for``, comprehensions) whose every binding in ``tree`` runs over a tuple or list of constant
    strings that are public names (no leading underscore): ``getattr(tl, name)`` with one reaches nothing hidden."""
    ok: dict[str, bool] = {}
    for n in ast.walk(tree):
        if isinstance(n, (ast.For, ast.comprehension)) and isinstance(n.target, ast.Name):
            it = n.iter
            good = isinstance(it, (ast.Tuple, ast.List)) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value.isidentifier() and
                not e.value.startswith("_") for e in it.elts)
            ok[n.target.id] = ok.get(n.target.id, True) and good
        elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr, ast.arg)):
            targets = [n.arg] if isinstance(n, ast.arg) else [
                t.id for t in ast.walk(n.target if not isinstance(n, ast.Assign) else ast.Tuple(elts=n.targets))
                if isinstance(t, ast.Name)]
            for t in targets:
                ok[t] = False
    return {k for k, v in ok.items() if v}


def _own_name_test(call: ast.Call, parents: dict[int, ast.AST]) -> bool:
    """``globals()`` asked whether it holds a name of the candidate's own (``"_ext" not in globals()``, or
    ``globals().get("_ext")``), not handed on."""
    up = parents.get(id(call))
    if isinstance(up, ast.Compare) and any(c is call for c in up.comparators) and \
            all(isinstance(o, (ast.In, ast.NotIn)) for o in up.ops):
        return isinstance(up.left, ast.Constant) and isinstance(up.left.value, str) and \
            not up.left.value.startswith("__")
    if isinstance(up, ast.Attribute) and up.attr == "get":
        c = parents.get(id(up))
        return isinstance(c, ast.Call) and bool(c.args) and isinstance(c.args[0], ast.Constant) and \
            isinstance(c.args[0].value, str) and not c.args[0].value.startswith("__")
    return False


def _ctypes_call(name: str) -> bool:
    """A call of ctypes' (``ctypes.cast``, ``torch.ctypes.c_void_p``, ``C.POINTER`` with ``C`` bound to ctypes)."""
    return "ctypes" in name.split(".")[:-1]


def _names_harness(text: str) -> bool:
    """``text`` names the harness's package, forwards or backwards, whatever separates its two words."""
    flat = re.sub(r"[^a-z]", "", text.lower())
    return "kernelbenchharness" in flat or "ssenrahhcneblenrek" in flat


def _fold_str(node: ast.AST) -> tuple[str | None, list[str]]:
    """The string an expression spells when it is made of string constants only (``+``, f-strings without
    fields, ``"".join([...])``), else None; and every string constant in it."""
    pieces = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)]

    def fold(x: ast.AST) -> str | None:
        if isinstance(x, ast.Constant) and isinstance(x.value, str):
            return x.value
        if isinstance(x, ast.BinOp) and isinstance(x.op, ast.Add):
            a, b = fold(x.left), fold(x.right)
            return a + b if a is not None and b is not None else None
        if isinstance(x, ast.JoinedStr):
            parts = [fold(v) for v in x.values]
            return "".join(parts) if all(p is not None for p in parts) else None  # type: ignore[arg-type]
        if isinstance(x, ast.Call) and isinstance(x.func, ast.Attribute) and x.func.attr == "join" and \
                isinstance(x.func.value, ast.Constant) and isinstance(x.func.value.value, str) and len(x.args) == 1 \
                and isinstance(x.args[0], (ast.List, ast.Tuple)):
            parts = [fold(v) for v in x.args[0].elts]
            return x.func.value.value.join(parts) if all(p is not None for p in parts) else None  # type: ignore[arg-type]
        return None

    return fold(node), pieces


def _check_store(name: str, node: ast.AST, out: list[Finding]) -> None:
    """Assignment to ``name`` (canonical): switches, timers, library functions, an object's class."""
    if not name or "." not in name:
        return
    owner, attr = name.rsplit(".", 1)
    if attr == "__class__":  # an object turned into another class (a tensor into a lazy subclass, say)
        out.append(_f("static.tensor-subclass", Severity.CHEAT, "non-plain-tensor", f"assigns {name}", node))
        return
    if attr.startswith("_") and attr.lstrip("_") in _CLOCK_NAMES and owner.split(".")[0] != "self":
        # a clock's name on any object, a private copy too (a stop-40 attack slowed the harness's timing module's
        # ``_perf_counter_ns``, reached through importlib)
        out.append(_f("static.timer-tamper", Severity.CHEAT, "timer-tamper", f"assigns {name}", node))
        return
    if attr in _PRECISION_OFF and isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
            node.value.value is False:
        return  # turning a reduced-precision switch off asks for what the reference computes
    if name.startswith("torch.backends") or attr in _GLOBAL_FLAG_ATTRS:
        out.append(_f("static.global-state", Severity.CHEAT, "global-state", f"assigns {name}", node))
    elif attr in _TIMER_NAMES and (owner in _TIMER_OWNERS or owner.startswith(("torch", "time", "numpy", "triton"))):
        out.append(_f("static.timer-tamper", Severity.CHEAT, "timer-tamper", f"assigns {name}", node))
    elif owner.split(".")[0] in _LIBRARY_OWNERS and isinstance(node, ast.Assign) and \
            not owner.startswith(("torch.nn.Module", "self")):
        out.append(_f("static.timer-tamper", Severity.CHEAT, "timer-tamper", f"replaces library object {name}", node))


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
    "torch.backends.cuda.matmul.allow_fp16_accumulation",
    "torch.backends.fp32_precision",
    "torch.backends.cuda.matmul.fp32_precision",
    "torch.backends.cudnn.fp32_precision",
    "torch.backends.cudnn.conv.fp32_precision",
    "torch.backends.cudnn.rnn.fp32_precision",
    "torch.backends.mkldnn.fp32_precision",
    "torch.backends.mkldnn.matmul.fp32_precision",
    "torch.backends.mkldnn.enabled",
    "torch.get_float32_matmul_precision",
    "torch.get_default_dtype",
    "torch.is_grad_enabled",
    "torch.are_deterministic_algorithms_enabled",
)
# The switches that make fp32 matmul / convolution run in TF32 or another lower precision.
PRECISION_FLAG_NAMES = tuple(n for n in GLOBAL_FLAG_NAMES if "tf32" in n or "precision" in n)


def snapshot_global_flags(names: Iterable[str] = GLOBAL_FLAG_NAMES) -> dict[str, str]:
    """Current values of process-wide numeric switches (:data:`GLOBAL_FLAG_NAMES`), as strings."""
    import torch

    out: dict[str, str] = {}
    for name in names:
        parts = name.split(".")
        obj: Any = torch
        try:
            for p in parts[1:]:
                obj = getattr(obj, p)
            out[name] = repr(obj() if callable(obj) else obj)
        except Exception as e:  # noqa: BLE001 (attribute missing in this torch version, or no backend)
            out[name] = f"<unavailable: {type(e).__name__}>"
    return out


# --- runtime helpers used inside the candidate process (see worker.py) ---------------------------

# Library functions and classes the harness relies on in the candidate process, by owner: timers,
# comparisons, tensor methods used to read outputs, serialisation, and the profiler.
_PROTECTED_LIBRARY: dict[str, tuple[str, ...]] = {
    "time": ("perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns", "process_time",
             "process_time_ns", "thread_time", "sleep"),
    "torch": ("allclose", "equal", "isclose"),
    "torch.Tensor": ("__eq__", "__ne__", "copy_", "cpu", "to", "clone", "contiguous", "detach", "numpy", "equal",
                     "isnan", "nan_to_num", "as_subclass", "data_ptr", "__torch_function__", "element_size",
                     "numel", "is_floating_point", "view"),
    "torch.cuda": ("synchronize", "Event", "Stream", "current_stream", "default_stream"),
    "torch.cuda.Event": ("elapsed_time", "record", "synchronize", "query", "__init__", "__new__"),
    # the C methods torch.cuda.Event and torch.cuda.synchronize call (their C entry points too: c_entry_points)
    "torch._C._CudaEventBase": ("elapsed_time", "record", "synchronize", "query"),
    "torch._C": ("_cuda_synchronize",),
    "torch.testing": ("assert_close",),
    "torch.profiler": ("profile",),
    "torch.autograd.profiler": ("profile",),
    "triton.testing": ("do_bench",),
    "numpy": ("ascontiguousarray", "frombuffer", "fromfile"),
    "json": ("dumps", "loads"),
    # the timing loop summarises its samples with these in the candidate's process (a candidate that shrank
    # statistics.median at import reported a 2.7x speedup for an honest kernel)
    "statistics": ("median", "fmean", "mean", "stdev", "pstdev", "quantiles", "median_low", "median_high"),
    "math": ("sqrt", "hypot", "floor", "ceil", "isfinite", "isnan", "isinf", "fsum", "log10", "exp", "log"),
    "socket.socket": ("sendall", "send", "recv"),
    "threading": ("enumerate", "_start_new_thread", "_start_joinable_thread", "Thread"),
    "_thread": ("start_new_thread", "start_joinable_thread"),
    "builtins": ("open", "isinstance", "type", "len", "zip", "getattr", "hasattr", "sum", "any", "all", "min",
                 "max", "sorted", "repr", "print", "memoryview"),
}
# The harness's own modules loaded in the candidate process: every function, class and method in them.
_HARNESS_MODULES = ("worker", "timing", "channel", "tensorio", "build", "guards")
_MISSING = object()


def _resolve(dotted: str) -> Any:
    import importlib
    import sys

    mod_name, rest = dotted, ""
    while mod_name and mod_name not in sys.modules:
        mod_name, _, tail = mod_name.rpartition(".")
        rest = f"{tail}.{rest}" if rest else tail
    if not mod_name:
        try:
            return importlib.import_module(dotted)
        except ImportError:
            return _MISSING
    obj: Any = sys.modules[mod_name]
    for part in rest.split(".") if rest else ():
        obj = getattr(obj, part, _MISSING)
        if obj is _MISSING:
            return _MISSING
    return obj


class ProtectedSnapshot:
    """Identities of the objects the harness relies on in the candidate process, taken before any
    candidate code runs; :meth:`changed` names those replaced since (EXPLOITS K-14).

    Attributes are read with ``inspect.getattr_static`` (no descriptors run, no candidate code is
    triggered). Python functions also have their ``__code__``, ``__defaults__`` and ``__kwdefaults__``
    recorded, so swapping a function's code object in place is seen as well.
    """

    def __init__(self, extra: dict[str, tuple[Any, str]] | None = None) -> None:
        import inspect

        self._getattr_static = inspect.getattr_static
        self._entries: list[tuple[str, Any, str, Any, tuple[Any, ...]]] = []
        for owner_name, attrs in _PROTECTED_LIBRARY.items():
            owner = _resolve(owner_name)
            if owner is _MISSING:
                continue
            for attr in attrs:
                self._add(f"{owner_name}.{attr}", owner, attr)
        pkg = __name__.rpartition(".")[0]
        import sys

        for short in _HARNESS_MODULES:
            mod = sys.modules.get(f"{pkg}.{short}")
            if mod is None:
                continue
            for attr, value in list(vars(mod).items()):
                if attr.startswith("__") or not callable(value):
                    continue
                self._add(f"{mod.__name__}.{attr}", mod, attr)
                if isinstance(value, type) and value.__module__ == mod.__name__:
                    for m_name, m_val in list(vars(value).items()):
                        if callable(m_val) or isinstance(m_val, (staticmethod, classmethod, property)):
                            self._add(f"{mod.__name__}.{attr}.{m_name}", value, m_name)
        for label, (owner, attr) in (extra or {}).items():
            self._add(label, owner, attr)

    def _add(self, label: str, owner: Any, attr: str) -> None:
        try:
            value = self._getattr_static(owner, attr)
        except AttributeError:
            return
        self._entries.append((label, owner, attr, value, _code_parts(value)))

    def changed(self) -> list[str]:
        """Labels of protected objects that were replaced, removed, or had their code swapped."""
        out = []
        for label, owner, attr, value, parts in self._entries:
            try:
                now = self._getattr_static(owner, attr)
            except AttributeError:
                now = _MISSING
            if now is not value or _code_parts(now) != parts:
                out.append(label)
        return out


def _code_parts(obj: Any) -> tuple[Any, ...]:
    fn = getattr(obj, "__func__", obj)  # classmethod / staticmethod
    if isinstance(fn, property):
        fn = fn.fget
    code = getattr(fn, "__code__", None) if not isinstance(fn, type) else None
    if code is None:
        return c_entry_points(fn)
    return (id(code), id(getattr(fn, "__defaults__", None)), id(getattr(fn, "__kwdefaults__", None)))


_BUILTIN_FUNCTION = type(len)
_METHOD_DESCRIPTOR = type(str.join)


def _c_layout_ok() -> bool:
    import sys
    import sysconfig

    return sys.implementation.name == "cpython" and (3, 10) <= sys.version_info[:2] <= (3, 14) and \
        sys.maxsize > 2**32 and not sysconfig.get_config_var("Py_GIL_DISABLED")


_C_LAYOUT_OK = _c_layout_ok()


def c_entry_points(obj: Any) -> tuple[int, ...]:
    """The C addresses a call of a builtin function or method descriptor goes through: the object's method table
    entry (``PyMethodDef *``), that entry's C function (``ml_meth``) and the object's vectorcall slot. A candidate
    that rewrites one through ``ctypes`` keeps the Python object the same, so identity checks alone miss it (a
    stop-39 attack swapped ``time.perf_counter_ns``'s C function and reported times 19x too short). Empty for other
    objects and for interpreters whose object layout this does not know (not CPython 3.10-3.14, 64-bit, with the
    GIL); the layout is confirmed on each object (its ``m_self`` / ``d_type`` and ``d_name`` fields) before any
    pointer is followed."""
    if not _C_LAYOUT_OK or type(obj) not in (_BUILTIN_FUNCTION, _METHOD_DESCRIPTOR):
        return ()
    import ctypes

    def word(addr: int) -> int:
        return ctypes.c_void_p.from_address(addr).value or 0

    base = id(obj)
    if type(obj) is _BUILTIN_FUNCTION:
        # PyCFunctionObject: PyObject_HEAD, m_ml, m_self, m_module, m_weakreflist, vectorcall
        if word(base + 24) != (id(obj.__self__) if obj.__self__ is not None else 0):
            return ()
        ml, vectorcall = word(base + 16), word(base + 48)
    else:
        # PyMethodDescrObject: PyObject_HEAD, d_type, d_name, d_qualname, d_method, vectorcall
        if word(base + 16) != id(obj.__objclass__) or word(base + 24) != id(obj.__name__):
            return ()
        ml, vectorcall = word(base + 40), word(base + 48)
    if not ml:
        return ()
    # PyMethodDef: ml_name, ml_meth, ml_flags, ml_doc; its name must be the object's before ml_meth is trusted
    name = ctypes.c_char_p.from_address(ml).value
    if name is None or name.decode("utf-8", "replace") != obj.__name__:
        return ()
    return (ml, word(ml + 8), vectorcall)


def _starter() -> str:
    """The module whose code asked for the thread being started: the first caller outside ``threading``,
    ``concurrent.futures`` and this module (a library's pool started from the library's own code names the
    library; one the candidate's code started names ``kb_candidate``)."""
    import sys

    f = sys._getframe(2)
    while f is not None and str(f.f_globals.get("__name__", "")).startswith(
            ("threading", "concurrent.futures", "_thread", __name__)):
        f = f.f_back
    return str(f.f_globals.get("__name__", "")) if f is not None else ""


class ThreadWatch:
    """Tracks threads started by Python code after :meth:`install`, however they were started
    (``threading``, ``concurrent.futures``, or ``_thread.start_new_thread`` directly), while they run."""

    def __init__(self) -> None:
        self.live: dict[int, str] = {}
        #: every thread started since :meth:`install`, in order: its function and the module of the code that
        #: started it (:func:`_starter`)
        self.threads: list[tuple[str, str]] = []
        self.hook: Any = None

    def install(self) -> None:
        import _thread
        import threading

        original = _thread.start_new_thread
        watch = self

        def start_new_thread(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> int:
            name = getattr(function, "__qualname__", repr(function))
            target = getattr(getattr(function, "__self__", None), "_target", None)
            if target is not None:
                name = f"{name} -> {getattr(target, '__qualname__', repr(target))}"

            def run(*a: Any, **k: Any) -> Any:
                ident = _thread.get_ident()
                watch.live[ident] = name
                try:
                    return function(*a, **k)
                finally:
                    watch.live.pop(ident, None)

            watch.threads.append((name, _starter()))
            return original(run, args, kwargs or {})

        _thread.start_new_thread = start_new_thread
        threading._start_new_thread = start_new_thread  # type: ignore[attr-defined]
        self.hook = start_new_thread
        joinable = getattr(_thread, "start_joinable_thread", None)  # Python >= 3.13: threading starts here
        if joinable is not None:
            def start_joinable_thread(function: Any, *args: Any, **kwargs: Any) -> Any:
                name = getattr(function, "__qualname__", repr(function))

                def run() -> Any:
                    ident = _thread.get_ident()
                    watch.live[ident] = name
                    try:
                        return function()
                    finally:
                        watch.live.pop(ident, None)

                watch.threads.append((name, _starter()))
                return joinable(run, *args, **kwargs)

            _thread.start_joinable_thread = start_joinable_thread  # type: ignore[attr-defined]
            if hasattr(threading, "_start_joinable_thread"):
                threading._start_joinable_thread = start_joinable_thread  # type: ignore[attr-defined]

    def running(self) -> dict[int, str]:
        """Threads started since :meth:`install` that are still running, by ident."""
        return dict(self.live)


class ImportWatch:
    """Refuses imports of Python code the source scan never saw: a module whose file lies in the candidate's
    private folder (its working directory: ``open("h.py", "w")`` then ``import h``), outside every folder that was
    on ``sys.path`` when the watch was installed (``sys.path.insert(0, d)``), or that was written or changed after
    that (a module dropped into site-packages by a candidate running as root). It sits first on
    ``sys.meta_path``, asks the finders after it where a module not yet imported would come from, and raises
    ``ImportError`` for those; each refusal is also handed to ``on_refuse(name, origin)`` when it is made.

    Loaders that bypass the import statement (``importlib.util.spec_from_file_location``, which Triton and torch's
    extension builder use for what they compiled themselves) are not seen here; the scan refuses them in candidate
    code, and run-time ways to remove the watch (``sys.meta_path``) are refused there too.
    """

    def __init__(self, private_dirs: Iterable[str | os.PathLike[str]], on_refuse: Any = None) -> None:
        import sys
        import time

        self.private = tuple(os.path.realpath(d) for d in private_dirs)
        roots = {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
        # the folders the modules imported so far came from (an editable install's finder maps a package to a folder
        # that is not on sys.path)
        for name, mod in list(sys.modules.items()):
            file = getattr(mod, "__file__", None)
            if "." not in name and isinstance(file, str):
                folder = os.path.dirname(os.path.realpath(file))
                roots.add(os.path.dirname(folder) if os.path.basename(file).startswith("__init__.") else folder)
        roots.discard(os.path.realpath(os.getcwd()))
        self.roots = tuple(sorted(r for r in roots if not self._under(r, self.private)))
        self.since_s = time.time()
        self.on_refuse = on_refuse
        self._before: set[int] = set()

    @staticmethod
    def _under(path: str, folders: tuple[str, ...]) -> bool:
        return any(path == f or path.startswith(f.rstrip(os.sep) + os.sep) for f in folders)

    def why(self, origin: str) -> str | None:
        """Why a module at ``origin`` (a file or a package folder) is refused, or None."""
        real = os.path.realpath(origin)
        if self._under(real, self.private):
            return "it lies in the candidate's own folder"
        if not self._under(real, self.roots):
            return "its folder was not on sys.path when the candidate started"
        try:
            if os.stat(real).st_ctime >= self.since_s:
                return "it was written while the candidate ran"
        except OSError:
            return None
        return None

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        import sys

        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            origins = [spec.origin] if spec.origin and spec.origin not in ("built-in", "frozen") and \
                spec.has_location else list(spec.submodule_search_locations or [])
            for origin in origins:
                why = self.why(str(origin))
                if why is not None:
                    if self.on_refuse is not None:
                        self.on_refuse(fullname, str(origin), why)
                    raise ImportError(f"kbench refused to import {fullname} from {origin}: {why} (a candidate's "
                                      "Python must be in its one file, where the integrity checks read it)",
                                      name=fullname)
            return None  # the finder that found it imports it
        return None

    def install(self) -> None:
        import sys

        self._before = {id(f) for f in sys.meta_path}
        sys.meta_path.insert(0, self)

    def intact(self) -> bool:
        """The watch is still on ``sys.meta_path`` and no finder the candidate's code defined sits before it (a
        library's finder put first meanwhile, as setuptools' distutils shim does while it builds, is not the
        candidate's: its ``find_spec`` comes from a file on the original path, written before the watch began)."""
        import sys

        for f in list(sys.meta_path):
            if f is self:
                return True
            code = getattr(getattr(type(f), "find_spec", None), "__code__", None)
            if id(f) not in self._before and code is not None and self.why(code.co_filename) is not None:
                return False
        return False


# Operations whose fp32 arithmetic the TF32 / reduced-precision switches change.
_FLAG_SENSITIVE = ("mm", "matmul", "conv", "linear", "einsum", "tensordot", "dot", "scaled_dot_product", "rnn",
                   "lstm", "gru", "attention", "bilinear")


def run_watching_precision(call: Any) -> tuple[list[str], Any]:
    """Run ``call()`` while watching every PyTorch call made from Python for lower precision.

    Returns ``(evidence, result)``: ``evidence`` lists calls that consumed or produced float16 /
    bfloat16 / float8 tensors, and TF32-style switches found changed during a call (a candidate can
    flip one on and back off inside ``forward``). A ``TorchFunctionMode`` sees calls made from Python
    (tensor methods, ``torch.*``, ``torch.nn.functional``), not what a custom kernel does inside; the
    source scan covers kernel sources.

    Raises:
        whatever ``call`` raises.
    """
    import torch
    from torch.overrides import TorchFunctionMode

    low = {torch.float16, torch.bfloat16}
    low |= {d for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
            if (d := getattr(torch, n, None)) is not None}
    flags0 = snapshot_global_flags(PRECISION_FLAG_NAMES)
    seen: dict[str, int] = {}

    def lowered(obj: Any, depth: int = 0) -> Any:
        if isinstance(obj, torch.Tensor):
            return obj.dtype if obj.dtype in low else None
        if isinstance(obj, torch.dtype):
            return obj if obj in low else None
        if depth < 3 and isinstance(obj, (list, tuple)):
            return next((d for o in obj if (d := lowered(o, depth + 1)) is not None), None)
        if depth < 3 and isinstance(obj, dict):
            return next((d for o in obj.values() if (d := lowered(o, depth + 1)) is not None), None)
        return None

    class _Watch(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
            dtype = lowered((args, kwargs, out))
            if dtype is not None:
                key = f"{name} with {dtype}"
                seen[key] = seen.get(key, 0) + 1
            if len(seen) < 64 and any(m in name.lower() for m in _FLAG_SENSITIVE):
                for k, v in snapshot_global_flags(PRECISION_FLAG_NAMES).items():
                    if v != flags0[k]:
                        key = f"{k} = {v} during {name}"
                        seen[key] = seen.get(key, 0) + 1
            return out

    with _Watch():
        result = call()
    return [f"{k} (x{n})" for k, n in sorted(seen.items())][:20], result


def apply_tf32(policy: bool | None) -> None:
    """Set TF32 for matmul and cuDNN per a protocol's ``tf32`` (None = PyTorch's defaults: matmul off,
    cuDNN on). Applied in the trusted process before references and baselines, and in the candidate
    process before its code is imported, so both run under the same numeric rules."""
    import torch

    matmul, cudnn = (False, True) if policy is None else (bool(policy), bool(policy))
    torch.backends.cuda.matmul.allow_tf32 = matmul
    torch.backends.cudnn.allow_tf32 = cudnn


def cheat_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Cheat-severity findings, runtime evidence first: the verdict's tag names what the candidate was
    seen doing, not the name a static pattern gave it (a hidden trick may only match ``introspection``)."""
    cheats = [f for f in findings if f.severity is Severity.CHEAT]
    return sorted(cheats, key=lambda f: 0 if f.check.startswith("runtime.") else 1)
