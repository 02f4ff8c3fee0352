"""Isolated, content-addressed builds of ``load_inline`` / ``load`` extensions inside a candidate process.

Before a candidate's module is imported, :func:`install_build_hooks` replaces
``torch.utils.cpp_extension.load_inline`` and ``load`` with wrappers that

- name the extension ``kb_<hash>`` from a hash of everything that determines the binary (sources,
  functions, flags, include paths, the torch version and the CUDA arch list), so two candidates
  that both call their extension ``fast_op`` can never load each other's code (EXPLOITS K-26), and
  identical kernels share one build;
- build into the candidate's private build folder (never a shared folder it could poison);
- load a prebuilt binary (``<cache>/kb_<hash>/<module>.so``) from the read-only cache folder when one exists, so an
  identical kernel is never compiled twice. Only the trusted build pool fills that cache, and only with binaries it
  had compiled from inputs it holds: in a build pool process, a ``load_inline`` call that is self-contained
  (:func:`shared_build_args`: its sources' text and whitelisted flags, nothing read from files) is sent to the pool
  as those inputs, the pool names it and compiles it in a process of its own that never runs candidate code
  (:func:`compile_shared_extension`), and the call then loads the result from the cache. Any other call (``load()``
  of files, include paths, flags outside the whitelist) is compiled in the candidate's private folder, and what
  it makes never leaves that process;
- compile first without ``<torch/all.h>`` (the C++ frontend), which is most of the compile time of a
  typical kernel; a source that needs it is compiled again exactly as written;
- in that first compile, give the binding file (``main.cpp``, which starts with
  ``#include <torch/extension.h>``) a precompiled ``torch/extension.h`` from the cache when one was
  built for exactly its compiler flags (:func:`build_pch`, run by the trusted build pool). GCC uses a
  precompiled header only when the flags and macros it was made with match, and otherwise reads the
  header's text, so the object file is the same either way (byte for byte, checked in
  ``tests/pipeline/test_build_pch.py``); only the parse is skipped;
- wrap the returned module so calls into it are counted (a kernel built but never called on the
  tested path is reported by the worker).

Build failures raise :class:`CandidateBuildError`, which the worker reports as ``compile_error``.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import inspect
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

__all__ = ["CandidateBuildError", "BuildRecord", "install_build_hooks", "extension_key", "CountingModule",
           "with_no_gpu_hint", "binding_command", "build_pch", "pch_enabled", "PCH_SAFE_CFLAG", "shared_build_args",
           "compile_shared_extension"]


class CandidateBuildError(RuntimeError):
    """A candidate's extension failed to compile or link (message holds the compiler output tail)."""


class BuildRecord:
    """What the hooks saw: extensions built, cache hits, compile seconds, calls per extension."""

    def __init__(self) -> None:
        self.built: list[dict[str, Any]] = []
        self.cache_hits: list[str] = []
        self.compile_s: float = 0.0
        self.calls: dict[str, int] = {}
        self.kernel_names: set[str] = set()
        self.slim: list[str] = []
        self.pch: list[str] = []
        self.pch_missing: list[dict[str, Any]] = []

    def to_dict(self) -> dict[str, Any]:
        return {"built": self.built, "cache_hits": self.cache_hits, "compile_s": round(self.compile_s, 3),
                "calls": dict(self.calls), "kernel_names": sorted(self.kernel_names),
                "slim_headers": list(self.slim), "pch": list(self.pch), "pch_missing": list(self.pch_missing)}


class CountingModule:
    """Proxy for an extension module that counts calls to its functions."""

    def __init__(self, module: Any, key: str, record: BuildRecord) -> None:
        object.__setattr__(self, "_kb_module", module)
        object.__setattr__(self, "_kb_key", key)
        object.__setattr__(self, "_kb_record", record)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(object.__getattribute__(self, "_kb_module"), name)
        if callable(attr) and not name.startswith("__"):
            record: BuildRecord = object.__getattribute__(self, "_kb_record")
            key = object.__getattribute__(self, "_kb_key")

            def counted(*a: Any, **k: Any) -> Any:
                out = attr(*a, **k)  # a call that raises launched nothing: count only returns
                record.calls[key] = record.calls.get(key, 0) + 1
                return out

            counted.__name__ = getattr(attr, "__name__", name)
            counted.__doc__ = getattr(attr, "__doc__", None)
            return counted
        return attr

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_kb_module"), name, value)

    def __dir__(self) -> list[str]:
        return dir(object.__getattribute__(self, "_kb_module"))


def _file_text(p: str) -> str:
    try:
        return Path(p).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"<missing {p}>"


def with_no_gpu_hint(error: str, device_type: str) -> str:
    """``error`` of a failed build, with a hint when a CUDA candidate failed for want of a CUDA toolkit
    on a run without a GPU (torch says only "CUDA_HOME environment variable is not set")."""
    if device_type != "cuda" and "CUDA_HOME" in error and "hint:" not in error:
        return error + ("\nhint: this candidate compiles CUDA code and this run has no GPU (or no CUDA toolkit): "
                        "evaluate it on a machine with a CUDA GPU")
    return error


def target_arch_list(compute_capability: str | tuple[int, int] | None) -> str | None:
    """The ``TORCH_CUDA_ARCH_LIST`` every kbench build uses for a device, in the build pool and in the
    device slot alike (the extension cache key includes it, so the two must agree).

    Args:
        compute_capability: the target device's capability, ``"9.0"`` or ``(9, 0)``; None on a CPU.

    Returns:
        ``$KBENCH_CUDA_ARCH_LIST`` when set, else the device's own capability (``"9.0"``), else None.
        An ambient ``TORCH_CUDA_ARCH_LIST`` is deliberately ignored: GPU images often set one (several
        architectures), and a value that differs between the pool and the slot made every slot compile
        each extension again (seen on the H200: 40-65 s per candidate).
    """
    override = os.environ.get("KBENCH_CUDA_ARCH_LIST", "").strip()
    if override:
        return override
    if compute_capability is None:
        return None
    if isinstance(compute_capability, str):
        return compute_capability or None
    return f"{compute_capability[0]}.{compute_capability[1]}"


def extension_key(kind: str, bound: dict[str, Any], *, arch: str | None = None) -> str:
    """Content hash of a load_inline/load call: every argument that changes the binary, plus the
    torch version and ``TORCH_CUDA_ARCH_LIST`` (``arch``, default: this process's variable). ``name``,
    ``build_directory`` and ``verbose`` excluded."""
    import torch

    items = {k: v for k, v in bound.items() if k not in ("name", "build_directory", "verbose", "keep_intermediates")}
    if kind == "load":
        srcs = items.get("sources") or []
        if isinstance(srcs, str):
            srcs = [srcs]
        items["sources"] = [(Path(s).suffix, _file_text(s)) for s in srcs]
    items["__torch__"] = torch.__version__
    items["__arch__"] = os.environ.get("TORCH_CUDA_ARCH_LIST", "") if arch is None else arch
    blob = json.dumps(items, sort_keys=True, default=repr).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


SLIM_MACRO = "-DTORCH_INDUCTOR_CPP_WRAPPER"

#: Candidate ``extra_cflags`` the trusted side accepts when it builds a precompiled header: optimisation
#: levels, language standards, warnings, NDEBUG and fast-math. Anything else (plugins, response files,
#: include paths, outputs) never reaches a compiler run outside the sandbox.
PCH_SAFE_CFLAG = re.compile(r"|-O[0-3sg]?|-Ofast|-DNDEBUG|-ffast-math|-funroll-loops|-std=(c|gnu)\+\+(17|20|23)"
                            r"|-w|-Wall|-Wextra|-g0|-march=native|-fopenmp")

#: most candidate flags in a request the trusted side builds a header for (each flag set costs ~0.6 GB)
PCH_MAX_FLAGS = 3


def pch_request_ok(request: Any) -> bool:
    """Whether the trusted side may build a header for ``request`` (a ``BuildRecord.pch_missing``
    entry): whitelisted flags only (:data:`PCH_SAFE_CFLAG`, whole-string match after ``strip``), at most
    :data:`PCH_MAX_FLAGS` non-empty ones, none twice, no include paths, a boolean ``with_cuda``."""
    if not isinstance(request, dict) or not isinstance(request.get("key"), str):
        return False
    flags = request.get("extra_cflags")
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        return False
    real = [f.strip() for f in flags if f.strip()]
    return (not request.get("extra_include_paths") and isinstance(request.get("with_cuda"), bool)
            and len(real) <= PCH_MAX_FLAGS and len(set(real)) == len(real)
            and all(PCH_SAFE_CFLAG.fullmatch(f.strip()) for f in flags))


#: a token of a flag in a shared build: no path, space, quote, response file or shell or ninja character (torch
#: joins the flags of its build file with spaces, unquoted, and the build file's commands run in a shell)
_FLAG_TOKEN = re.compile(r"[A-Za-z0-9_=+,.:-]+")
#: host compiler flags of a shared build: optimisation, macros, language standard, warnings, code generation
#: (-f and -m switches but plugins, profiles and module mappers, which read files or run programs), debug info
_HOST_FLAG = re.compile(r"-O[0-3sgz]?|-Ofast|-D[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.+:-]*)?|-U[A-Za-z_][A-Za-z0-9_]*"
                        r"|--?std=(c|gnu)\+\+[0-9][0-9a-z]|-w|-W[a-z][a-z0-9=+-]*|-pthread|-pedantic|-g[0-3]?"
                        r"|-f(?!plugin|profile|auto-profile|module|self-test)[a-z][a-z0-9-]*(=[A-Za-z0-9_.+-]+)?"
                        r"|-m[a-z][a-z0-9=.-]*")
_ARCH = r"(sm|compute|lto)_[0-9]+[af]?"
#: nvcc's own flags of a shared build (its host flags also pass, through _HOST_FLAG)
_NVCC_FLAG = re.compile(r"--?use_fast_math|--?expt-relaxed-constexpr|--?expt-extended-lambda|--?extended-lambda"
                        r"|-lineinfo|--generate-line-info|-G|--device-debug|--?res-usage|--resource-usage|--?restrict"
                        r"|--?(ftz|prec-div|prec-sqrt|fmad)=(true|false)|--?maxrregcount=[0-9]+|(-t|--threads)=[0-9]+"
                        r"|--default-stream=(per-thread|legacy|null)|--?diag-suppress=[0-9,]+|--display-error-number"
                        r"|-rdc=(true|false)|--relocatable-device-code=(true|false)"
                        rf"|(-arch|--gpu-architecture|-code|--gpu-code)=({_ARCH}(,{_ARCH})*|native|all|all-major)"
                        rf"|(-gencode|--generate-code)=arch=compute_[0-9]+[af]?,code=({_ARCH}|\[{_ARCH}(,{_ARCH})*\])")
#: options to ptxas (``-Xptxas=...``): verbosity, optimisation, spill warnings, cache and register settings
_PTXAS_FLAG = re.compile(r"-v|--verbose|-O[0-3]|--?warn-on-spills|-warn-spills|--?warn-on-local-memory-usage"
                         r"|-warn-lmem-usage|--?allow-expensive-optimizations(=(true|false))?|-dlcm=c[ag]"
                         r"|--?def-load-cache=[a-z]+|--?maxrregcount=[0-9]+|--opt-level=[0-3]")
#: linker flags of a shared build: libraries found on the compiler's own search path, no folders
_LD_FLAG = re.compile(r"-l[A-Za-z0-9_+.-]+|-pthread|-fopenmp|-O[0-3]|-Wl,--(no-)?as-needed")
#: nvcc options whose value may be the next list entry (``["-Xptxas", "-v"]``)
_NVCC_VALUED = ("-Xptxas", "--ptxas-options", "-Xcompiler", "--compiler-options", "-gencode", "--generate-code",
                "-arch", "--gpu-architecture", "-code", "--gpu-code", "-t", "--threads", "-maxrregcount",
                "--maxrregcount")
#: load_inline arguments a shared build compiles from (any other one makes the call private)
_SHARED_ARGS = frozenset({"cpp_sources", "cuda_sources", "sycl_sources", "functions", "extra_cflags",
                          "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags", "extra_include_paths", "with_cuda",
                          "with_sycl", "is_python_module", "with_pytorch_error_handling", "keep_intermediates",
                          "use_pch", "no_implicit_headers"})
#: load_inline arguments that name or place the build, not what it makes
_UNSHARED_ARGS = ("name", "build_directory", "verbose")


def _flag_ok(token: str, kind: str) -> bool:
    if kind == "ld":
        return bool(_LD_FLAG.fullmatch(token))
    if _HOST_FLAG.fullmatch(token):
        return True
    if kind != "cuda":
        return False
    opt, _, value = token.partition("=")
    if opt in ("-Xptxas", "--ptxas-options"):
        return all(_PTXAS_FLAG.fullmatch(v) for v in value.split(","))
    if opt in ("-Xcompiler", "--compiler-options"):
        return all(_HOST_FLAG.fullmatch(v) for v in value.split(","))
    return bool(_NVCC_FLAG.fullmatch(token))


def _flags_ok(flags: Any, kind: str) -> bool:
    """Whether every flag of a list is one a shared build accepts (each entry split at spaces, as the shell that
    runs torch's build file splits it; an nvcc option's value may be the next entry)."""
    if flags is None:
        return True
    if not isinstance(flags, (list, tuple)) or len(flags) > 64 or not all(isinstance(f, str) for f in flags):
        return False
    tokens = [t for f in flags for t in f.strip().split(" ") if t]
    if any(not _FLAG_TOKEN.fullmatch(t) for t in tokens):
        return False
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if kind == "cuda" and token in _NVCC_VALUED and i + 1 < len(tokens):
            token, i = f"{token}={tokens[i + 1]}", i + 1
        if not _flag_ok(token, kind):
            return False
        i += 1
    return True


def _texts_ok(value: Any, *, required: bool = False) -> bool:
    if value is None or isinstance(value, str):
        return value is not None or not required
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


#: a directive that names a file by a quoted or macro operand (``#include "..."``, ``#include MACRO``, the same for
#: ``include_next``, ``import`` and ``embed``), or by an angle-bracket operand that is absolute or climbs (``</..>``,
#: ``<../..>``): the file's text is not in the arguments
_FILE_DIRECTIVE = re.compile(r"#\s*(?:include_next|include|import|embed)\b\s*(?:[^<\s]|<\s*/|<[^>\n]*\.\.)")
#: other ways a source makes the compiler read a file: ``__has_include``/``__has_embed`` (a file's presence changes
#: the code), ``#pragma GCC dependency``, and the assembler's ``.incbin``
_FILE_WORDS = ("__has_include", "__has_embed", "dependency", "incbin")


def _reads_no_files(value: Any) -> bool:
    """Whether a source text (or list of them) makes the compiler read no file besides the toolchain's own headers
    named in angle brackets: no quoted or macro ``#include`` (nor ``include_next``, ``import``, ``embed``), no
    absolute or climbing angle-bracket path, no ``__has_include``, ``#pragma GCC dependency`` or ``.incbin``.
    Backslash-newlines are joined and digraph and trigraph spellings of ``#`` (``%:``, ``??=``) read as ``#``
    first, as the preprocessor reads them. A second attack (stop 39) had the pool's shared build include a header
    another candidate wrote in ``/dev/cpu``: the cache name is the text's, so the binary must follow from the
    text alone."""
    texts = [value] if isinstance(value, str) else list(value or [])
    for text in texts:
        norm = text.replace("\\\r\n", "").replace("\\\n", "").replace("%:", "#").replace("??=", "#")
        if _FILE_DIRECTIVE.search(norm) or any(w in norm for w in _FILE_WORDS):
            return False
    return True


def shared_build_args(bound: Any) -> dict[str, Any] | None:
    """The arguments of a ``load_inline`` call as the build pool compiles them into the shared cache, or None when
    the call is not self-contained: its binary would depend on something besides these arguments' text.

    Used on both sides: a build process asks the pool for a shared build only when this returns arguments, and
    the pool (trusted) accepts a request only when this returns arguments for what the process sent. What such
    a build reads is the arguments' text and the toolchain's own headers and libraries: no file named by the
    sources themselves beyond ``#include <...>`` of the toolchain's headers (:func:`_reads_no_files`), no include path, no
    ``use_pch`` (torch's header in torch's folder), no SYCL, flags from a whitelist only (optimisation, macros,
    language standard, warnings, code generation, nvcc's and ptxas's switches, ``-l`` libraries; never a path,
    a plugin, a response file, a profile or a shell character).

    Args:
        bound: every argument of the call by name, defaults applied (``name``, ``build_directory`` and
            ``verbose`` may be there; they are left out), as JSON values.

    Returns:
        The arguments without ``name``, ``build_directory`` and ``verbose``, as JSON values (a copy), or None.
    """
    import torch.utils.cpp_extension as ce

    if not isinstance(bound, dict):
        return None
    params = {p for p in inspect.signature(ce.load_inline).parameters if p not in _UNSHARED_ARGS}
    args = {k: v for k, v in bound.items() if k not in _UNSHARED_ARGS}
    if set(args) != params or not params <= _SHARED_ARGS:
        return None
    functions = args["functions"]
    ok = (_texts_ok(args["cpp_sources"], required=True) and _texts_ok(args["cuda_sources"])
          and _reads_no_files(args["cpp_sources"]) and _reads_no_files(args["cuda_sources"])
          and not args["sycl_sources"] and (args["with_sycl"] is None or args["with_sycl"] is False)
          and not args["extra_sycl_cflags"]
          and (functions is None or _texts_ok(functions)
               or (isinstance(functions, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                       for k, v in functions.items())))
          and not args["extra_include_paths"] and args["use_pch"] is False
          and (args["with_cuda"] is None or isinstance(args["with_cuda"], bool))
          and all(isinstance(args[k], bool) for k in ("is_python_module", "with_pytorch_error_handling",
                                                      "keep_intermediates", "no_implicit_headers"))
          and _flags_ok(args["extra_cflags"], "c") and _flags_ok(args["extra_cuda_cflags"], "cuda")
          and _flags_ok(args["extra_ldflags"], "ld"))
    if not ok:
        return None
    try:
        out: dict[str, Any] = json.loads(json.dumps(args))
    except (TypeError, ValueError):
        return None
    return out


def pch_enabled() -> bool:
    """False when ``$KBENCH_PCH`` is ``0`` (no precompiled headers offered or built).

    Raises:
        ValueError: a value other than an on/off switch (:func:`..envflags.env_switch`).
    """
    from ..envflags import env_switch

    return env_switch("KBENCH_PCH")


def slim_headers_enabled() -> bool:
    """False when ``$KBENCH_SLIM_HEADERS`` is ``0`` (the binding file includes all of torch's headers).

    Raises:
        ValueError: a value other than an on/off switch (:func:`..envflags.env_switch`).
    """
    from ..envflags import env_switch

    return env_switch("KBENCH_SLIM_HEADERS")


def binding_command(bound: dict[str, Any]) -> tuple[list[str], list[str]] | None:
    """The host compiler and flags torch's JIT gives the binding file ``main.cpp`` of a ``load_inline``
    call, without ``-DTORCH_EXTENSION_NAME`` (the only flag that names the extension).

    Read from the ``build.ninja`` that torch itself writes for these arguments (into a scratch folder;
    nothing is compiled), so the flags are exactly the ones the real build will use.

    Args:
        bound: the call's arguments by name (``cpp_sources``, ``cuda_sources``, ``extra_cflags``,
            ``extra_include_paths``, ``with_cuda``...), as given to ``load_inline``.

    Returns:
        ``(compiler argv, flags)``, or None when this torch lays its build file out differently (then
        no precompiled header is used: builds are only slower, never different).
    """
    try:
        import torch.utils.cpp_extension as ce

        writer = getattr(ce, "_write_ninja_file_to_build_library", None)
        if writer is None:
            return None
        with_cuda = bound.get("with_cuda")
        if with_cuda is None:
            with_cuda = bool(bound.get("cuda_sources"))
        with tempfile.TemporaryDirectory(prefix="kb_ninja_") as d:
            sources = [os.path.join(d, "main.cpp")] + ([os.path.join(d, "cuda.cu")] if with_cuda else [])
            args = {"path": os.path.join(d, "build.ninja"), "name": "kb_pch", "sources": sources,
                    "extra_cflags": list(bound.get("extra_cflags") or []),
                    # an explicit arch keeps torch from asking the driver for one (CUDA would start in the
                    # trusted process); nvcc's flags never reach main.cpp's
                    "extra_cuda_cflags": ["-arch=sm_90"],
                    "extra_sycl_cflags": [], "extra_ldflags": [],
                    "extra_include_paths": list(bound.get("extra_include_paths") or []),
                    "with_cuda": bool(with_cuda), "with_sycl": False, "is_standalone": False}
            params = inspect.signature(writer).parameters
            writer(**{k: v for k, v in args.items() if k in params})
            text = Path(args["path"]).read_text()
        var = dict(re.findall(r"^(\w+) = (.*)$", text, flags=re.M))
        if "cflags" not in var or not re.search(r"^\s+command = \$cxx .*\$cflags", text, flags=re.M):
            return None
        flags = [f for f in shlex.split(var["cflags"]) + shlex.split(var.get("post_cflags", ""))
                 if not f.startswith("-DTORCH_EXTENSION_NAME=")]
        return shlex.split(var.get("cxx", "c++")), flags
    except Exception:  # noqa: BLE001 - a torch without this layout: no precompiled header, nothing else
        return None


_COMPILER_VERSIONS: dict[str, str] = {}


def _compiler_version(compiler: list[str]) -> str:
    key = " ".join(compiler)
    if key not in _COMPILER_VERSIONS:
        for _ in range(2):  # once more after a timeout: the process may have been stopped meanwhile (a slot lets
            # another's timing window in mid-build), and the version goes into the header cache's key
            try:
                out = subprocess.run([*compiler, "-dumpfullversion", "-dumpversion"], capture_output=True, text=True,
                                     timeout=30)
                _COMPILER_VERSIONS[key] = out.stdout.strip() if out.returncode == 0 else f"rc{out.returncode}"
            except (OSError, subprocess.SubprocessError) as e:
                _COMPILER_VERSIONS[key] = f"error {type(e).__name__}"
                if isinstance(e, subprocess.TimeoutExpired):
                    continue
            break
    return _COMPILER_VERSIONS[key]


def _pch_key(compiler: list[str], flags: list[str]) -> str:
    """Everything a header's content depends on that GCC itself does not check: the compiler's path
    and version, torch's version and commit, the flags, ``extension.h``'s text. (The headers it
    includes are checked at use against the dependency list stored beside it: ``deps.json``.)"""
    import torch
    import torch.utils.cpp_extension as ce

    header = Path(ce.include_paths()[0]) / "torch" / "extension.h"
    blob = json.dumps([compiler, os.path.realpath(shutil.which(compiler[0]) or compiler[0]), _compiler_version(compiler),
                       torch.__version__, getattr(torch.version, "git_version", ""), flags,
                       _file_text(str(header))]).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def _deps_unchanged(pch: Path) -> bool:
    """True when every header the precompiled one was built from still has its recorded size and
    modification time (GCC does not check them: a header from an older torch or CUDA would be used)."""
    try:
        deps = json.loads((pch / "deps.json").read_text())
        for path, size, mtime_ns in deps:
            st = os.stat(path)
            if st.st_size != size or st.st_mtime_ns != mtime_ns:
                return False
        return bool(deps)
    except (OSError, ValueError, TypeError):
        return False


def pch_usable(pch: Path) -> bool:
    """Whether ``<cache>/pch/<key>`` holds a finished header whose text is torch's own and whose
    dependencies are unchanged (see :func:`_deps_unchanged`)."""
    import torch.utils.cpp_extension as ce

    try:
        ours = (pch / "torch" / "extension.h").read_bytes()
        theirs = (Path(ce.include_paths()[0]) / "torch" / "extension.h").read_bytes()
    except OSError:
        return False
    return ours == theirs and (pch / "torch" / "extension.h.gch").is_file() and _deps_unchanged(pch)


def _pch_request(bound: dict[str, Any]) -> tuple[str, list[str], list[str]] | None:
    cmd = binding_command(bound)
    if cmd is None:
        return None
    return _pch_key(*cmd), cmd[0], cmd[1]


def build_pch(cache_dir: Path, request: dict[str, Any], *, timeout_s: float = 900.0,
              started: Callable[[subprocess.Popen[bytes]], None] | None = None,
              env: dict[str, str] | None = None) -> Path | None:
    """Build the precompiled ``torch/extension.h`` a candidate's build asked for, into
    ``<cache_dir>/pch/<key>/torch/`` (the header's text beside its ``.gch``, as GCC looks for them).

    Runs on the trusted side, outside any sandbox, so nothing of the candidate's reaches the compiler
    but a whitelisted set of ``extra_cflags`` (:data:`PCH_SAFE_CFLAG`); the flags themselves are
    computed here by :func:`binding_command`, and the result is used only if their key equals the one
    the candidate's build reported. About 35 s of one core and 0.6 GB of disk per flag set (torch 2.13,
    GCC 12).

    Args:
        cache_dir: the build cache folder.
        request: an entry of ``BuildRecord.pch_missing``: ``key``, ``with_cuda`` (bool), ``extra_cflags``
            (list of str, the candidate's own, without the slim macro), ``extra_include_paths`` (must be empty).
        timeout_s: compiler wall-clock limit, seconds.
        started: called with the compiler process once it runs (so a pool can kill its group on close).
        env: the compiler's environment (the builds' own, so both see the same variables).

    Returns:
        The folder to put first on the include path, or None when the request is refused, the key differs,
        or the compiler fails (builds then go on without it).
    """
    if not pch_request_ok(request):
        return None
    flags = [f.strip() for f in request["extra_cflags"]]
    bound = {"cuda_sources": ["//"] if request.get("with_cuda") else [], "with_cuda": None,
             "extra_cflags": flags + [SLIM_MACRO], "extra_include_paths": []}
    req = _pch_request(bound)
    if req is None or req[0] != request.get("key"):
        return None
    key, compiler, cflags = req
    final = Path(cache_dir) / "pch" / key
    if pch_usable(final):
        return final
    if final.exists():  # stale (a header it was built from changed) or damaged: build it again
        shutil.rmtree(final, ignore_errors=True)
    import torch.utils.cpp_extension as ce

    tmp = Path(cache_dir) / "pch" / f".{key}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    (tmp / "torch").mkdir(parents=True)
    try:
        shutil.copyfile(Path(ce.include_paths()[0]) / "torch" / "extension.h", tmp / "torch" / "extension.h")
        deps_file = tmp / "deps.d"
        proc = _start_compiler([*compiler, "-x", "c++-header", str(tmp / "torch" / "extension.h"),
                                 "-o", str(tmp / "torch" / "extension.h.gch"), "-MD", "-MF", str(deps_file), *cflags],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                env=env)
        if started is not None:
            started(proc)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return None
        if rc != 0 or not (tmp / "torch" / "extension.h.gch").is_file():
            return None
        deps = []
        for path in shlex.split(deps_file.read_text().replace("\\\n", " ").split(":", 1)[1]):
            if Path(path).resolve().parent != (tmp / "torch").resolve():
                st = os.stat(path)
                deps.append([os.path.abspath(path), st.st_size, st.st_mtime_ns])
        (tmp / "deps.json").write_text(json.dumps(deps))
        (tmp / "command.json").write_text(json.dumps({"compiler": compiler, "flags": cflags}))
        try:
            os.replace(tmp, final)
        except OSError:  # another build stored it first
            pass
        return final if (final / "torch" / "extension.h.gch").is_file() else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _start_compiler(argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, **kw)


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """Kill a process started with ``start_new_session=True`` and everything it started (a compiler
    driver's ``cc1plus`` outlives a plain kill of the driver)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def _kernel_names(bound: dict[str, Any]) -> set[str]:
    import re

    text = ""
    for k in ("cuda_sources", "cpp_sources"):
        v = bound.get(k)
        if isinstance(v, (list, tuple)):
            text += "\n".join(map(str, v))
        elif v:
            text += str(v)
    return set(re.findall(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+)?void\s+(\w+)", text))


def _load_prebuilt(name: str, so_path: Path, is_python_module: bool) -> Any:
    import torch

    if not is_python_module:
        torch.ops.load_library(str(so_path))
        return str(so_path)
    loader = importlib.machinery.ExtensionFileLoader(name, str(so_path))
    spec = importlib.util.spec_from_file_location(name, str(so_path), loader=loader)
    if spec is None:
        raise CandidateBuildError(f"cannot load prebuilt extension {so_path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _fresh(bound: dict[str, Any]) -> dict[str, Any]:
    """The arguments with every list copied (torch's load_inline inserts its includes and the module
    definition into the source lists it gets, so a second try with the same lists defines the module
    twice: "redefinition of PyInit_...")."""
    return {k: (list(v) if isinstance(v, list) else v) for k, v in bound.items()}


ExtensionShare = Callable[[str, dict[str, Any]], bool]


def _compile(orig: Callable[..., Any], kind: str, bound: dict[str, Any], uname: str, *, build_dir: Path,
             cache_dir: Path | None, pch: bool, record: BuildRecord, private: bool) -> Any:
    """Compile one extension into ``<build_dir>/<uname>/`` with ``orig`` (torch's ``load_inline`` or ``load``) and
    return what it returns; first without ``<torch/all.h>`` (and with a precompiled header when the cache has one
    for these flags), then, if that fails, as written. The binary is recorded in ``record.built`` (``private``:
    its call is not self-contained, :func:`shared_build_args`).

    Raises:
        CandidateBuildError: the compiler or linker failed, or the arguments are bad.
    """
    out_dir = build_dir / uname
    out_dir.mkdir(parents=True, exist_ok=True)
    bound = dict(bound)
    bound["name"] = uname
    bound["build_directory"] = str(out_dir)
    bound["verbose"] = False
    t0 = time.perf_counter()
    slim = slim_headers_enabled() and kind == "load_inline"
    done = False
    mod: Any = None
    if slim:
        # First try without <torch/all.h> (the C++ frontend: nn, optim, data...), which
        # <torch/extension.h> skips when TORCH_INDUCTOR_CPP_WRAPPER is defined; that macro
        # changes nothing else in torch's headers. Code that compiles this way calls the same
        # declarations; code that needs the frontend fails here and is built as written.
        sb = _fresh(bound)  # torch inserts into the source lists it is given: each try gets its own
        sb["extra_cflags"] = list(sb.get("extra_cflags") or []) + [SLIM_MACRO]
        if sb.get("cuda_sources"):
            sb["extra_cuda_cflags"] = list(sb.get("extra_cuda_cflags") or []) + [SLIM_MACRO]
        if cache_dir is not None and pch and pch_enabled() and not sb.get("no_implicit_headers"):
            req = _pch_request(sb)
            if req is not None:
                folder = cache_dir / "pch" / req[0]
                if pch_usable(folder):
                    # an -I folder is searched before torch's -isystem ones; only main.cpp sees it
                    sb["extra_cflags"] = sb["extra_cflags"] + [f"-I{shlex.quote(str(folder))}"]
                    record.pch.append(req[0])
                else:
                    wc = sb.get("with_cuda")
                    request = {
                        "key": req[0], "with_cuda": bool(sb.get("cuda_sources")) if wc is None else bool(wc),
                        "extra_cflags": [str(f) for f in bound.get("extra_cflags") or []],
                        "extra_include_paths": [str(f) for f in bound.get("extra_include_paths") or []]}
                    if pch_request_ok(request):
                        record.pch_missing.append(request)
        try:
            mod = orig(**sb)
            done = True
        except Exception:
            shutil.rmtree(out_dir, ignore_errors=True)
            out_dir.mkdir(parents=True, exist_ok=True)
    if not done:
        try:
            mod = orig(**_fresh(bound))
        except Exception as e:  # compiler/linker failure, bad source
            record.compile_s += time.perf_counter() - t0
            raise CandidateBuildError(f"{type(e).__name__}: {e}") from None
    else:
        record.slim.append(uname)

    record.compile_s += time.perf_counter() - t0
    so_files = sorted(out_dir.glob(f"{uname}*.so"), key=lambda p: p.stat().st_mtime)[-1:]
    record.built.append({"name": uname, "so": str(so_files[0]) if so_files else "",
                         "seconds": round(time.perf_counter() - t0, 3), "private": private})
    return mod


def compile_shared_extension(name: str, args: dict[str, Any], build_dir: Path, cache_dir: Path | None, *,
                             pch: bool = False) -> dict[str, Any]:
    """Compile a shared extension for the build pool, without loading it (mode ``compile_ext`` of the worker: a
    process of the pool's that runs no candidate code; the binary is copied into the cache once it has exited).

    Args:
        name: ``kb_<hash>`` the pool computed from ``args``; compiled only if this process computes the same.
        args: :func:`shared_build_args` of the call.
        build_dir: this process's private build folder (the binary lands in ``<build_dir>/<name>/``).
        cache_dir: the cache, for a precompiled header (``pch``).
        pch: use a precompiled header from the cache when one fits (the pool checks it after the build).

    Returns:
        The ``ext_compiled`` message: ``ok``, ``so`` (the binary's path), ``error`` (compiler output tail),
        ``unsupported`` (not compiled: arguments refused, another key, a torch without the hook used),
        ``compile_s``, ``pch`` (header keys used), ``pch_missing``, ``slim``.
    """
    import torch.utils.cpp_extension as ce

    record = BuildRecord()
    out: dict[str, Any] = {"event": "ext_compiled", "ok": False, "so": "", "error": "", "unsupported": False}
    shared = shared_build_args(args)
    real = getattr(ce, "_import_module_from_library", None)
    if shared is None or real is None or f"kb_{extension_key('load_inline', shared)}" != name:
        return {**out, "unsupported": True}

    def no_import(module_name: str, path: str, is_python_module: bool) -> str:
        return os.path.join(path, f"{module_name}.so")  # torch's loader: never called here

    ce._import_module_from_library = no_import
    try:
        _compile(ce.load_inline, "load_inline", shared, name, build_dir=build_dir, cache_dir=cache_dir, pch=pch,
                 record=record, private=False)
        so = str(record.built[-1]["so"]) if record.built else ""
        out.update(ok=bool(so), so=so, error="" if so else "the build made no binary")
    except CandidateBuildError as e:
        out["error"] = str(e)[-8000:]
    finally:
        ce._import_module_from_library = real
    out.update(compile_s=round(record.compile_s, 3), pch=list(record.pch), pch_missing=list(record.pch_missing),
               slim=list(record.slim))
    return out


def install_build_hooks(build_dir: Path, cache_dir: Path | None, record: BuildRecord, *, pch: bool = False,
                        share: ExtensionShare | None = None) -> None:
    """Replace ``load_inline`` and ``load`` in ``torch.utils.cpp_extension`` (see the module docstring).

    Args:
        build_dir: private folder for this process's builds (``<build_dir>/kb_<hash>/``).
        cache_dir: read-only folder of prebuilt ``kb_<hash>.so`` files, or None.
        record: filled with what happened.
        pch: offer and ask for precompiled headers from ``<cache_dir>/pch`` (the build pool's
            processes, whose binaries it checks; never a device slot's).
        share: the build pool's processes get one (:class:`~.builder.BuildPool`): called with ``kb_<hash>`` and
            :func:`shared_build_args` of a self-contained ``load_inline`` call that is not in the cache; it
            returns True once the pool has the extension in the cache (compiled by the pool from those
            arguments, or found there, another process having asked first), False when this process should
            compile it itself (privately), and raises :class:`CandidateBuildError` when the pool's compile of
            it failed. Candidates whose Python differs but whose extension is the same compile it once, even
            when they are built at the same time; no binary this process makes enters the cache.
    """
    import torch.utils.cpp_extension as ce

    orig_inline: Callable[..., Any] = ce.load_inline
    orig_load: Callable[..., Any] = ce.load
    sig_inline = inspect.signature(orig_inline)
    sig_load = inspect.signature(orig_load)

    def _wrap(kind: str, orig: Callable[..., Any], sig: inspect.Signature) -> Callable[..., Any]:
        def hooked(*args: Any, **kwargs: Any) -> Any:
            try:
                ba = sig.bind(*args, **kwargs)
            except TypeError as e:
                raise CandidateBuildError(f"{kind}() called with bad arguments: {e}") from None
            ba.apply_defaults()
            bound = dict(ba.arguments)
            key = extension_key(kind, bound)
            uname = f"kb_{key}"
            record.kernel_names |= _kernel_names(bound)
            is_py = bool(bound.get("is_python_module", True))
            shared = shared_build_args(bound) if kind == "load_inline" else None
            if cache_dir is not None:
                cached = _cached(cache_dir, uname, is_py)
                if cached is None and share is not None and shared is not None and share(uname, shared):
                    cached = _cached(cache_dir, uname, is_py)
                if cached is not None:
                    return cached
            mod = _compile(orig, kind, bound, uname, build_dir=build_dir, cache_dir=cache_dir, pch=pch,
                           record=record, private=shared is None)
            return CountingModule(mod, uname, record) if is_py else mod

        def _cached(folder: Path, uname: str, is_py: bool) -> Any:
            hits = sorted((folder / uname).glob("*.so")) if (folder / uname).is_dir() else []
            if not hits:
                return None
            record.cache_hits.append(uname)
            mod = _load_prebuilt(hits[0].stem, hits[0], is_py)
            return CountingModule(mod, uname, record) if is_py else mod

        hooked.__name__ = orig.__name__
        hooked.__doc__ = orig.__doc__
        hooked.__wrapped__ = orig  # type: ignore[attr-defined]
        return hooked

    ce.load_inline = _wrap("load_inline", orig_inline, sig_inline)
    ce.load = _wrap("load", orig_load, sig_load)
