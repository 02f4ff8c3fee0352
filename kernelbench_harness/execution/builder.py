"""Compiling candidates' extensions on the CPU, ahead of and beside GPU evaluation.

A :class:`BuildPool` runs up to ``workers`` sandboxed candidate processes in ``build`` mode: each
imports one candidate with no GPU visible, so its ``load_inline`` / ``load`` calls go through the hooks
of :mod:`.build`. What enters the shared, content-addressed cache (``kb_<hash>/<module>.so``, where GPU
evaluation loads it without compiling) is only ever made by the pool itself:

- a self-contained ``load_inline`` call (:func:`.build.shared_build_args`) reaches the pool as its
  arguments (``ext_request``), not as a binary. The pool checks them, names the extension ``kb_<hash>``
  from them (:func:`.build.extension_key`, never the name the process sent), and has a fresh sandboxed
  process that runs no candidate code (worker mode ``compile_ext``) compile exactly those arguments,
  without loading the result; once that process has exited (and any precompiled header it used is
  unchanged, :meth:`BuildPool._pch_intact`), the binary is copied into the cache and the candidate's
  process loads it from there. Candidates whose Python differs but whose extension is the same share one
  compile, even when built at the same time (a claim per name: the second one waits for the first's);
- any other call (``load()`` of files the candidate wrote, include paths, flags off the whitelist) is
  compiled by the candidate's own process in its private folder, and nothing it makes is stored: a
  candidate process can name an extension, forge messages and write any file, and still not put a
  binary in the cache under any name, its own or another candidate's.

An identical self-contained extension is never compiled twice, and no candidate process can write into
the cache itself (Landlock; where it is off, :meth:`BuildPool.changed_cache_entries` catches a replaced
binary after the fact).

A definite compiler/linker failure is final (``compile_error``, the GPU is never used for it). An
import that fails for another reason (module-level code that needs a GPU, say) is left to the GPU
evaluation to judge.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import Candidate
from .build import build_pch, extension_key, kill_group, pch_enabled, pch_request_ok, shared_build_args
from .channel import ChannelError, ChannelTimeout
from .process import Launcher
from .sandbox import clean_environment
from .scratch import claim_scratch, release_fd

__all__ = ["BuildPool", "BuildOutcome", "needs_build"]

#: a cache entry's name: ``kb_`` and the extension's content hash (build.extension_key)
_EXT_NAME = re.compile(r"kb_[0-9a-f]{24}")

log = logging.getLogger(__name__)


def _tree_fingerprint(folder: Path, *, content: bool = False) -> tuple[tuple[Any, ...], ...]:
    """(relative path, inode, size, change time in ns[, sha256 of a file's bytes]) of a folder and
    everything in it. Change times are coarse (a few ms); ``content`` closes that gap for small files."""
    out = []
    for root, dirs, files in os.walk(folder):
        for name in [".", *dirs, *files]:
            p = Path(root) / name
            st = os.lstat(p)
            row: tuple[Any, ...] = (str(p.relative_to(folder)), st.st_ino, st.st_size, st.st_ctime_ns)
            if content and name in files:
                row += (hashlib.sha256(p.read_bytes()).hexdigest(),)
            out.append(row)
    return tuple(sorted(out))


def _str_list(value: Any) -> list[str]:
    """A list of strings from a build message, or [] (a candidate process can send anything)."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def needs_build(source: str) -> bool:
    """True when the candidate compiles a C++/CUDA extension (Triton kernels compile at first launch)."""
    return "load_inline" in source or "cpp_extension" in source


@dataclass(slots=True)
class _SharedWork:
    """What the pool compiled for one candidate's build (``compiled``: names) and its compilers' seconds."""

    compiled: list[str] = field(default_factory=list)
    compile_s: float = 0.0
    #: compiles the pool started for it (failed ones too): at most BuildPool.MAX_SHARED_COMPILES
    started: int = 0


@dataclass(frozen=True, slots=True)
class BuildOutcome:
    """Result of building one candidate's extensions.

    Attributes:
        status: ``built`` (compiled now), ``cached`` (every extension already in the cache),
            ``compile_error`` (final), ``deferred`` (import failed for another reason: judge on the GPU),
            ``timeout``.
        error: compiler output tail or the import error.
        seconds: wall time of the build process.
        compile_s: time spent inside the compiler hooks.
        extensions: ``kb_<hash>`` names the candidate loads.
    """

    status: str
    error: str = ""
    seconds: float = 0.0
    compile_s: float = 0.0
    extensions: tuple[str, ...] = ()


class BuildPool:
    """Concurrent, sandboxed, cached builds of candidate extensions.

    Args:
        cache_dir: the content-addressed cache (``kb_<hash>/<module>.so``); created if missing.
        workers: builds at once (each may run nvcc; ``MAX_JOBS`` per build is set to 2).
        arch_list: ``TORCH_CUDA_ARCH_LIST`` of the target GPUs (e.g. ``"9.0"``); required to build
            CUDA code with no GPU visible.
        timeout_s: wall-clock limit of one build.

    Attributes:
        max_pch: most precompiled headers (flag sets) this pool builds (4).
        stats: counts of candidates by :class:`BuildOutcome` status (``built``, ``cached``, ...), ``compile_s``
            (compiler seconds), ``ext_compiled`` (the pool's compiles of shared extensions), ``shared`` (requests
            answered by another request's compile), ``private`` (extensions compiled by candidates' own
            processes: not self-contained, never cached), ``pch_built``, ``pch_used``, ``slim``.
    """

    #: shared compiles the pool runs for one candidate's build (a cached extension costs none); further
    #: requests are answered ``ext_private``. Real candidates build one to three extensions.
    MAX_SHARED_COMPILES = 8

    def __init__(self, cache_dir: str | os.PathLike[str], *, workers: int = 4, arch_list: str | None = None,
                 timeout_s: float = 900.0, scratch_dir: str | os.PathLike[str] | None = None,
                 start_method: str = "zygote", sandbox: bool = True) -> None:
        self.cache_dir = Path(cache_dir)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.workers = max(1, workers)
        self.timeout_s = timeout_s
        self.sandbox = sandbox
        base = Path(scratch_dir) if scratch_dir else Path(tempfile.gettempdir()) / "kbench"
        self.scratch, self._scratch_fd = claim_scratch(base, "kbbuild_")  # a killed run's folder is swept later
        extra = {"CUDA_VISIBLE_DEVICES": "", "MAX_JOBS": "2"}
        if arch_list:
            extra["TORCH_CUDA_ARCH_LIST"] = arch_list
        self.env = clean_environment(os.environ, extra)
        self.launcher = Launcher(self.env, start_method)
        self._sem: asyncio.Semaphore | None = None
        self._inflight: dict[str, asyncio.Future[BuildOutcome]] = {}
        # extensions being compiled by one of this pool's processes (``kb_<hash>``): another process that needs
        # the same one waits for it and loads it from the cache (candidates whose Python differs but whose
        # extension is the same, built at the same time, compile it once)
        self._ext_cond = threading.Condition()
        self._ext_busy: set[str] = set()
        self.stats = {"built": 0, "cached": 0, "compile_error": 0, "deferred": 0, "timeout": 0, "compile_s": 0.0,
                      "pch_built": 0, "pch_used": 0, "slim": 0, "shared": 0, "ext_compiled": 0, "private": 0}
        self._pch_lock = threading.Lock()
        self._pch_keys: set[str] = set()
        self.max_pch = 4
        self._pch_procs: list[subprocess.Popen[bytes]] = []
        self._pch_threads: list[threading.Thread] = []
        self._pch_seen: dict[str, tuple[tuple[Any, ...], ...]] = {}
        self._so_seen: dict[str, tuple[tuple[Any, ...], ...]] = {}
        self._closed = False
        self._sweep_stale_pch()

    async def build(self, candidate: Candidate) -> BuildOutcome:
        """Build ``candidate``'s extensions (identical sources in flight share one build)."""
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.workers)
        key = hashlib.sha256(candidate.source.encode()).hexdigest()
        fut = self._inflight.get(key)
        if fut is not None:
            return await fut
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._inflight[key] = fut
        try:
            async with self._sem:
                out = await asyncio.to_thread(self._build_sync, candidate)
            fut.set_result(out)
            return out
        except BaseException as e:
            fut.set_exception(e)
            raise
        finally:
            self._inflight.pop(key, None)

    def _build_sync(self, candidate: Candidate) -> BuildOutcome:
        t0 = time.perf_counter()
        jobdir = Path(tempfile.mkdtemp(prefix="b_", dir=self.scratch))
        try:
            src = jobdir / "candidate.py"
            src.write_text(candidate.source, encoding="utf-8")
            for sub in ("build", "home", "tmp", "outputs"):
                (jobdir / sub).mkdir()
            job: dict[str, Any] = {"mode": "build", "job_dir": str(jobdir), "inputs_dir": str(jobdir),
                                   "candidate_path": str(src), "device": "cpu", "protocol": {},
                                   "build_dir": str(jobdir / "build"), "build_cache": str(self.cache_dir),
                                   "pch": pch_enabled(), "ext_share": True}
            h = self.launcher.start(job, self._sandbox(jobdir))
            held: set[str] = set()  # the extension this job's request is compiling (at most one)
            shared = _SharedWork()
            try:
                deadline = time.monotonic() + self.timeout_s
                while True:
                    msg = h.chan.recv(timeout_s=max(0.0, deadline - time.monotonic()))
                    event = msg.get("event")
                    if event == "built":
                        break
                    if event == "ext_request":
                        h.chan.send(self._serve_request(msg.get("args"), held, deadline, shared))
                    # anything else (a forged ext_claim / ext_done of older versions) is ignored: no message of a
                    # candidate's process stores a binary
            except ChannelTimeout:
                self._release_claims(held)
                h.kill("timeout")
                h.close()
                self.stats["timeout"] += 1
                return BuildOutcome("timeout", f"build did not finish within {self.timeout_s:.0f} s",
                                    time.perf_counter() - t0, shared.compile_s)
            except ChannelError as e:
                self._release_claims(held)
                h.close()
                self.stats["deferred"] += 1
                return BuildOutcome("deferred", f"build process ended: {e}", time.perf_counter() - t0,
                                    shared.compile_s)
            except BaseException:  # a harness error: the process goes, and its claim with it (others wait on it)
                h.kill("harness error")
                h.close()
                raise
            finally:
                self._release_claims(held)
            h.close()
            info = msg.get("build") if isinstance(msg.get("build"), dict) else {}
            built = [b for b in info.get("built", []) if isinstance(b, dict)] \
                if isinstance(info.get("built"), list) else []
            # ``built``: what the process compiled itself (private, never stored); ``cache_hits``: what it loaded
            # from the cache, the pool's compiles for it included
            names = tuple([str(b.get("name", "")) for b in built] + _str_list(info.get("cache_hits")))
            try:
                compile_s = max(0.0, float(info.get("compile_s", 0.0))) + shared.compile_s
            except (TypeError, ValueError):
                compile_s = shared.compile_s
            self.stats["compile_s"] += compile_s
            used = _str_list(info.get("pch"))  # its folder was first on the binding file's include path
            self.stats["pch_used"] += len(used)
            self.stats["slim"] += len(_str_list(info.get("slim_headers")))
            self.stats["private"] += len(built)
            missing = info.get("pch_missing")
            for request in missing if isinstance(missing, list) else []:
                self._want_pch(request)
            if used and not self._pch_intact(used):
                self.stats["deferred"] += 1
                return BuildOutcome("deferred", "a precompiled header changed while this candidate was built; "
                                    "it is compiled again without one", time.perf_counter() - t0, compile_s, names)
            if msg.get("ok"):
                status = "built" if built or shared.compiled else "cached"
                self.stats[status] += 1
                return BuildOutcome(status, "", time.perf_counter() - t0, compile_s, names)
            if msg.get("kind") == "compile_error" and not msg.get("import_error"):
                self.stats["compile_error"] += 1
                return BuildOutcome("compile_error", str(msg.get("error", ""))[:8000], time.perf_counter() - t0,
                                    compile_s, names)
            self.stats["deferred"] += 1
            return BuildOutcome("deferred", str(msg.get("error", ""))[:4000], time.perf_counter() - t0,
                                compile_s, names)
        finally:
            shutil.rmtree(jobdir, ignore_errors=True)

    def _sandbox(self, jobdir: Path) -> dict[str, Any] | None:
        """The sandbox of a build process whose private folder is ``jobdir`` (None: sandboxing is off)."""
        return {"private_dir": str(jobdir), "cpu_time_s": int(self.timeout_s * 4), "file_size_bytes": 4 << 30,
                "new_netns": True, "landlock": True} if self.sandbox else None

    def _serve_request(self, args: Any, held: set[str], deadline: float, shared: _SharedWork) -> dict[str, Any]:
        """Answer a build process's ``ext_request``: the arguments of a ``load_inline`` call it wants from the
        shared cache. The name is computed here from the arguments, never taken from the process; the binary
        is compiled here (:meth:`_compile_shared`) unless the cache has it or gets it from another build's
        compile meanwhile (one claim per name, :meth:`_serve_claim`).

        Returns:
            ``{"cmd": "ext_cached", "name": ...}`` (load it from the cache), ``{"cmd": "ext_private"}`` (compile
            it yourself: arguments that are not self-contained, or the pool could not compile them), or
            ``{"cmd": "ext_error", "error": ...}`` (the compiler failed on them).

        Raises:
            ChannelTimeout: the compile ran past the job's ``deadline`` (``time.monotonic()`` seconds).
        """
        checked = shared_build_args(args)
        if checked is None:
            return {"cmd": "ext_private"}
        name = f"kb_{extension_key('load_inline', checked, arch=self.env.get('TORCH_CUDA_ARCH_LIST', ''))}"
        if self._serve_claim(name, held, deadline) == "ext_cached":
            return {"cmd": "ext_cached", "name": name}
        if shared.started >= self.MAX_SHARED_COMPILES:
            # a candidate may ask for many compiles, each one the pool's work: past the cap it compiles its own,
            # on its own time
            self._release_claims(held)
            return {"cmd": "ext_private"}
        shared.started += 1
        try:
            return self._compile_shared(name, checked, deadline, shared)
        finally:
            self._release_claims(held)

    def _compile_shared(self, name: str, args: dict[str, Any], deadline: float,
                        shared: _SharedWork) -> dict[str, Any]:
        """Compile extension ``name`` from ``args`` (checked by :func:`.build.shared_build_args`) in a fresh
        sandboxed process of mode ``compile_ext`` (no candidate code, the binary never loaded there), then, once
        it has exited, store its binary in the cache. A binary made with a precompiled header that changed
        meanwhile is not stored: it is compiled once more, without one. Returns the answer to the request (see
        :meth:`_serve_request`)."""
        for use_pch in ((True, False) if pch_enabled() else (False,)):
            jobdir = Path(tempfile.mkdtemp(prefix="x_", dir=self.scratch))
            try:
                for sub in ("build", "home", "tmp", "outputs"):
                    (jobdir / sub).mkdir()
                job = {"mode": "compile_ext", "job_dir": str(jobdir), "name": name, "args": args,
                       "build_dir": str(jobdir / "build"), "build_cache": str(self.cache_dir), "pch": use_pch}
                h = self.launcher.start(job, self._sandbox(jobdir))
                try:
                    while True:
                        msg = h.chan.recv(timeout_s=max(0.0, deadline - time.monotonic()))
                        if msg.get("event") == "ext_compiled":
                            break
                    if h.wait_exit(max(1.0, min(30.0, deadline - time.monotonic()))) is None:
                        raise ChannelTimeout(f"the compile of {name} did not exit")
                except ChannelTimeout:
                    h.kill("timeout")
                    h.close()
                    raise
                except ChannelError as e:
                    h.close()
                    log.warning("the compile of shared extension %s ended: %s; the candidate compiles it", name, e)
                    return {"cmd": "ext_private"}
                except BaseException:
                    h.kill("harness error")
                    h.close()
                    raise
                h.close()
                try:
                    seconds = max(0.0, float(msg.get("compile_s", 0.0)))
                except (TypeError, ValueError):
                    seconds = 0.0
                shared.compile_s += seconds
                self.stats["ext_compiled"] += 1
                self.stats["slim"] += len(_str_list(msg.get("slim")))
                used = _str_list(msg.get("pch"))
                self.stats["pch_used"] += len(used)
                missing = msg.get("pch_missing")
                for request in missing if isinstance(missing, list) else []:
                    self._want_pch(request)
                if msg.get("unsupported"):
                    return {"cmd": "ext_private"}
                if not msg.get("ok"):
                    return {"cmd": "ext_error", "error": str(msg.get("error") or "the extension failed to compile")}
                if used and not self._pch_intact(used):
                    continue  # its binary may hold the changed header's code: not stored, compiled again
                so = Path(str(msg.get("so") or ""))
                if so.parent != jobdir / "build" / name:
                    return {"cmd": "ext_private"}
                self._store_binary(name, so, jobdir)
                if (self.cache_dir / name).is_dir():
                    shared.compiled.append(name)
                    return {"cmd": "ext_cached", "name": name}
                return {"cmd": "ext_private"}
            finally:
                shutil.rmtree(jobdir, ignore_errors=True)
        return {"cmd": "ext_private"}

    def _store_binary(self, name: str, so: Path, jobdir: Path) -> None:
        """Copy a binary the pool's compile process made (``so``, only from inside its private ``jobdir``) into the
        cache as ``<cache>/<name>/<so.name>``, unless an entry ``name`` is there already.

        Called once that process has exited; still, nothing here trusts the path: the file is opened first,
        without following a final link and without blocking (a link to a secret, a FIFO or ``/dev/zero`` is
        never read), and what is copied is that open file, once it is known to be a regular file with one name,
        the one at ``so`` inside ``jobdir``. A file that cannot be read is not stored (never an exception: the
        caller holds a claim that other builds wait on)."""
        if not _EXT_NAME.fullmatch(name) or so.name in ("", ".", ".."):
            return
        entry = self.cache_dir / name
        if entry.is_dir():
            return
        try:
            fd = os.open(so, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return
        tmp: Path | None = None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                return
            real = so.resolve()
            real.relative_to(jobdir.resolve())
            there = os.stat(real, follow_symlinks=False)
            if (there.st_dev, there.st_ino) != (st.st_dev, st.st_ino):
                return  # the path names another file now
            tmp = self.cache_dir / f".{name}.{os.getpid()}.{time.monotonic_ns()}.tmp"
            tmp.mkdir()
            with os.fdopen(os.dup(fd), "rb") as src, open(tmp / so.name, "xb") as dst:
                shutil.copyfileobj(src, dst)  # keep the file name: it is the module's name
            try:
                os.replace(tmp, entry)
                tmp = None
            except OSError:  # another build stored it first
                return
            with self._pch_lock:
                self._so_seen[name] = _tree_fingerprint(entry, content=True)
        except (OSError, ValueError) as e:
            log.warning("binary %s of a build not stored in the cache: %s", name, e)
        finally:
            os.close(fd)
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def _serve_claim(self, name: Any, held: set[str], deadline: float) -> str:
        """Claim extension ``name`` (``kb_<hash>``, computed by :meth:`_serve_request`) for one build's request:
        ``"ext_cached"`` when it is in the cache now (another request's compile stored it while this one waited),
        else ``"ext_go"`` (compile it; the claim is held in ``held`` until that compile ends). A job holds one
        claim at a time, so no two wait for each other; the wait ends at the job's ``deadline``
        (``time.monotonic()`` seconds), after which it compiles without the claim."""
        self._release_claims(held)  # a new claim drops an unfinished one (never held here: defence in depth)
        if not isinstance(name, str) or not _EXT_NAME.fullmatch(name):
            return "ext_go"
        with self._ext_cond:
            waited = False
            while name in self._ext_busy and (left := deadline - time.monotonic()) > 0:
                waited = True
                self._ext_cond.wait(left)
            if (self.cache_dir / name).is_dir():
                self.stats["shared"] += 1
                return "ext_cached"
            # a claim that ended without a binary (the compile failed, or its process was ended): the processes
            # that waited for it compile side by side, as without claims, instead of one after another (the same
            # failing source compiled again by each waiter in turn, until the last ones ran out of time)
            if name not in self._ext_busy and not waited:
                self._ext_busy.add(name)
                held.add(name)
            return "ext_go"

    def _release_claims(self, held: set[str]) -> None:
        """Drop the claims in ``held`` and wake the processes waiting for them."""
        if not held:
            return
        with self._ext_cond:
            self._ext_busy -= held
            held.clear()
            self._ext_cond.notify_all()

    def _sweep_stale_pch(self) -> None:
        """Remove half-built header folders (``pch/.<key>.<pid>.<ns>.tmp``) whose builder process is gone."""
        for tmp in (self.cache_dir / "pch").glob(".*.tmp") if (self.cache_dir / "pch").is_dir() else []:
            parts = tmp.name.split(".")
            try:
                pid = int(parts[2])
                os.kill(pid, 0)
                continue  # its builder still runs
            except (IndexError, ValueError, ProcessLookupError):
                shutil.rmtree(tmp, ignore_errors=True)
            except PermissionError:
                continue

    def changed_cache_entries(self, names: Any) -> list[str]:
        """The extension cache entries (``kb_<hash>``) among ``names`` that changed since this pool
        stored them or first saw them (inode, size, change time of the folder and its files). Changed
        ones are removed, so they are compiled again; the caller evaluates the candidate again.

        Why: where candidate processes run without Landlock (the H200 image), the cache folder is
        writable to them, and one candidate could replace another's prebuilt binary. A process cannot
        set a change time back, so a replacement shows here, after the fact but before the result counts.

        Args:
            names: ``EvalResult.extra["build"]["cache_hits"]`` of an evaluation (anything else: ignored).
        """
        changed = []
        for name in _str_list(names):
            entry = self.cache_dir / name
            if not (name.startswith("kb_") and name[3:].isalnum()):
                continue
            try:
                now = _tree_fingerprint(entry, content=True)
            except OSError:
                now = ()
            with self._pch_lock:
                first = self._so_seen.setdefault(name, now)
            if now != first:
                changed.append(name)
                log.error("prebuilt extension %s changed during the run: removed; the candidate that loaded it is "
                          "evaluated again", name)
                shutil.rmtree(entry, ignore_errors=True)
                with self._pch_lock:
                    self._so_seen.pop(name, None)
        return changed

    def _pch_intact(self, keys: list[str]) -> bool:
        """Whether the header folders a build used are as the pool first saw them (see the module
        docstring). A changed one is removed, so it is built again."""
        ok = True
        for key in keys:
            folder = self.cache_dir / "pch" / key
            if not key.isalnum() or folder.parent != self.cache_dir / "pch":
                return False
            try:
                now = _tree_fingerprint(folder)
            except OSError:
                now = ()
            with self._pch_lock:
                first = self._pch_seen.setdefault(key, now)
            if now != first or not now:
                ok = False
                log.error("precompiled header %s changed during the run: removed; builds that used it are "
                          "compiled again", key)
                shutil.rmtree(folder, ignore_errors=True)
                with self._pch_lock:
                    self._pch_seen.pop(key, None)
                    self._pch_keys.discard(key)
        return ok

    def _want_pch(self, request: Any) -> None:
        """Start building the precompiled header a build asked for, once per key (see build_pch)."""
        if not pch_enabled() or not pch_request_ok(request):
            return
        key = str(request.get("key", ""))
        with self._pch_lock:
            # each one costs ~35 s of a core and ~0.6 GB: a few flag sets cover real candidates
            # (kernelsseum-v0: no flags or -O3), and a candidate cannot make the pool build more
            if self._closed or not key or key in self._pch_keys or len(self._pch_keys) >= self.max_pch:
                return
            self._pch_keys.add(key)

        def started(proc: subprocess.Popen[bytes]) -> None:
            with self._pch_lock:
                self._pch_procs.append(proc)
                if self._closed:
                    kill_group(proc)

        def work() -> None:
            t0 = time.perf_counter()
            try:
                out = build_pch(self.cache_dir, request, timeout_s=self.timeout_s, started=started, env=self.env)
                if out is not None:
                    with self._pch_lock:
                        self._pch_seen[key] = _tree_fingerprint(out)
            except Exception:  # noqa: BLE001 - builds go on without it
                log.exception("precompiled header %s failed", key)
                return
            if out is not None:
                with self._pch_lock:
                    self.stats["pch_built"] += 1
                log.info("precompiled torch/extension.h %s built in %.1f s", key, time.perf_counter() - t0)

        t = threading.Thread(target=work, name=f"kbench-pch-{key[:8]}", daemon=True)
        self._pch_threads.append(t)
        t.start()

    def wait_pch(self, timeout_s: float | None = None) -> None:
        """Wait for the precompiled headers being built (tests and benchmarks; a run never waits)."""
        for t in list(self._pch_threads):
            t.join(timeout_s)

    def close(self) -> None:
        with self._pch_lock:
            self._closed = True
            for proc in self._pch_procs:
                if proc.poll() is None:
                    kill_group(proc)
        for t in list(self._pch_threads):
            t.join(10)
        self.launcher.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        self._scratch_fd = release_fd(self._scratch_fd)
