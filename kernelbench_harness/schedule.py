"""The order in which a run hands its problems to the device slots.

With several slots on one GPU (``--gpus 0,0,0,0,0,0``) the memory ledger lets a job with GiB input sets
claim most of the device, and the others wait for it. In problem order, level 1's large problems came one
after another: every slot held a large job waiting for memory while one ran, and the small problems of
levels 2 and 3 waited for all of them (H200 session 13: 1,391 of the sweep's 1,500 slot-seconds waiting
for memory were level 1's; 943 s in all, where the large problems' own work was about 480 s and the small
ones' about 2,400 slot-seconds). :func:`interleave_large` spreads the large problems evenly among the
small ones, so one large job at a time runs beside small ones. The order changes nothing else: each
result is the same whichever order the jobs run in.
"""

from __future__ import annotations

import types
import warnings
from typing import Any, Hashable, Mapping, Sequence, TypeVar

K = TypeVar("K", bound=Hashable)

__all__ = ["LARGE_PROBLEM_BYTES", "LANE_BYTES", "problem_nbytes", "problem_sizes", "Sizing", "sizing_workers",
           "interleave_large"]

#: a problem whose input set, outputs and weights take at least this many bytes is "large" for the order
LARGE_PROBLEM_BYTES = 2 << 30

#: a problem of at least this many bytes runs one per GPU at a time, ahead of the others, where several slots
#: share a GPU (``EvalJob.large``, :class:`.executors.base.AffinityQueue`). In the H200 sweeps (sessions 14-15)
#: the memory ledger gave KernelBench's problems of 6-16 GiB claims of 40-99% of the device, and those of
#: 2-4.5 GiB claims of 10-35%.
LANE_BYTES = 6 << 30

#: seconds the sizing child gives one problem's model and forward on meta tensors; past it the problem is sized
#: by what was sized by then (its inputs, and its weights once the model was built). Recurrent layers run their meta forward step by step in Python decompositions: KernelBench's
#: eight LSTM/GRU problems took 50 of the 57 s that sizing levels 1-3 took without a limit (2-core CPU), and
#: their outputs are a few MiB. The child's first meta operation (about 1.4 s there, loading torch's meta
#: registrations) runs before the first problem, outside the limit.
FORWARD_LIMIT_S = 1.0


def problem_sizes(codes: Mapping[str, str], timeout_s: float = 120.0) -> dict[str, int]:
    """:func:`problem_nbytes` of each problem, in child processes (as everywhere else the harness runs problem
    code: a problem that exits, hangs, changes torch's global state or touches a GPU or the network must
    not reach the run's driver). The children see no GPU (``CUDA_VISIBLE_DEVICES`` empty) and run the Hugging
    Face libraries offline. :class:`Sizing` starts the same children without waiting for them.

    Args:
        codes: problem key (any string) -> the problem's source.
        timeout_s: the children's limit in all (seconds); past it, or if one fails, no sizes.

    Returns:
        Key -> bytes (-1 where a problem could not be sized); ``{}`` where a child failed or ran out of time
        (every problem then counts as small: the run keeps its problem order).
    """
    return Sizing(codes).result(timeout_s)


def sizing_workers(n_problems: int) -> int:
    """How many children size ``n_problems`` problems: one per 16 problems, at most a third of this process's
    CPUs (the device slots start beside them) and at most 8; at least one. In one child, sizing KernelBench's
    levels 1-3 (250 problems) took 21 s on a 2-core CPU, and on the H200 host the sweep's first job waited
    19.7 s for it after the device slots had started (H200 session 24)."""
    import os

    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus // 3, -(-n_problems // 16)))


class Sizing:
    """:func:`problem_sizes`'s children, started at once and read later (:meth:`result`), so that a run sizes
    its problems while its device slots start: the problems dealt out in turn to ``workers`` children (level 3's
    recurrent problems, the slowest to size, are neighbours in a run's order). :meth:`stop` kills them (a run that
    failed before it needed them).

    With ``cache`` (a folder), sizes are kept between runs in ``sizes-v<format>-torch<version>.json`` there, by the
    SHA-256 of each problem's source: a problem sized before is not sized again, and a run whose problems were all
    sized before starts no child. A size the forward limit (:data:`FORWARD_LIMIT_S`) cut short while the model was
    being built depends on the host's load and is not kept. One cut in the forward (its inputs and weights counted,
    its outputs not) is kept as a lower bound and used by later runs without waiting (level 3's recurrent problems,
    L3/35-42, are cut there in every run: sizing them again each run held the first job back about 16 s on an H200
    host, session 25). A run that uses lower bounds sizes those problems again in a background child, at low
    priority and with :data:`REFINE_LIMIT_S` a problem, which keeps what it completes for the runs after (a run
    that ends first kills it: the next one tries again). Sizes only order a run and mark its large problems (never a
    verdict); a cache file that cannot be read, or holds anything but sizes, is ignored and written anew.

    Args:
        codes: problem key (any string) -> the problem's source.
        workers: children (None: :func:`sizing_workers`); at most one per problem.
        cache: the folder of the sizes kept between runs (None: none kept).
    """

    def __init__(self, codes: Mapping[str, str], workers: int | None = None, cache: Any = None) -> None:
        import hashlib

        self.keys = set(map(str, codes))
        self._got: dict[str, int] | None = None
        self._hash = {str(k): hashlib.sha256(str(v).encode()).hexdigest() for k, v in codes.items()}
        self._cache_file = _sizes_file(cache) if cache is not None else None
        self._kept, lower = _read_sizes(self._cache_file) if self._cache_file is not None else ({}, set())
        self._known = {k: self._kept[h] for k, h in self._hash.items() if h in self._kept}
        items = [(k, v) for k, v in codes.items() if str(k) not in self._known]
        n = max(1, min(workers if workers is not None else sizing_workers(len(items)), len(items)))
        self._children: list[_SizingChild] = []
        #: the background child sizing again the problems kept as lower bounds (never waited for)
        self.refine: _SizingChild | None = None
        try:
            for i in range(n if items else 0):
                self._children.append(_SizingChild(dict(items[i::n])))
            again = {k: v for k, v in codes.items() if str(k) in self._known and self._hash[str(k)] in lower}
            if again:
                self.refine = _SizingChild(again, limit_s=REFINE_LIMIT_S, keep=self._cache_file)
        except BaseException:  # (a full /tmp for a child's stdin, say): none of those started is left running
            self.stop()
            raise

    @property
    def _proc(self) -> Any:
        """The first child's process (None where it could not start, or none was needed)."""
        return self._children[0]._proc if self._children else None

    def result(self, timeout_s: float = 120.0) -> dict[str, int]:
        """The sizes (see :func:`problem_sizes`), waiting up to ``timeout_s`` seconds in all for them; ``{}``
        (and every child killed) past that or where any child failed: every problem then counts as small, as
        with one child (a partial sizing would put a large problem beside another one unannounced)."""
        import time

        if self._got is not None:
            return self._got
        end = time.monotonic() + timeout_s
        got: dict[str, int] = dict(self._known)
        cut: set[str] = set()
        lower: set[str] = set()
        for ch in self._children:
            # (a child that finished while an earlier one was waited for is read, even once the time is up)
            part = ch.result(max(self.READ_GRACE_S, end - time.monotonic()))
            cut |= ch.cut
            lower |= ch.lower
            if ch.keys and not part:
                for c in self._children:  # (the background child goes on: it keeps what it completes)
                    c.stop()
                got = {}
                break
            got.update(part)
        self._got = got
        if got and self._cache_file is not None and len(got) > len(self._known):
            new = {k: v for k, v in got.items() if k in self._hash and k not in self._known and k not in cut}
            _write_sizes(self._cache_file, {self._hash[k]: v for k, v in new.items()},
                         lower={self._hash[k] for k in new if k in lower})
        return got

    #: the least a child is given to be read after the time for all of them is up (it may have finished)
    READ_GRACE_S = 1.0

    def stop(self) -> None:
        """Kill every child and its process group (see :meth:`_SizingChild.stop`), the background one too."""
        for ch in self._children + ([self.refine] if self.refine is not None else []):
            ch.stop()
        if self._got is None:
            self._got = {}


#: the sizes file's format (in its name): a change to what is counted starts a new file
#: (2: ``{"sizes": {source SHA-256: bytes}, "lower": [SHA-256 of the sizes that are lower bounds]}``)
SIZES_FORMAT = 2

#: seconds the background child (:attr:`Sizing.refine`) gives one problem kept as a lower bound
REFINE_LIMIT_S = 120.0

#: the keys of the sizing child's lists of problems the limit cut short: while the model was built (not kept),
#: and in the forward (kept as lower bounds)
_CUT = "__cut__"
_LOWER = "__lower__"

#: the most bytes a sizes file may have to be read (a folder others can write: never a reason to run out of memory)
_SIZES_FILE_MAX_BYTES = 16 << 20


def _sizes_file(folder: Any) -> Any:
    """The sizes file in ``folder`` for this torch (sizes come from its meta kernels)."""
    from pathlib import Path

    import torch

    version = "".join(c if c.isalnum() or c in ".+-_" else "_" for c in str(torch.__version__))
    return Path(folder) / f"sizes-v{SIZES_FORMAT}-torch{version}.json"


def _read_sizes(path: Any) -> tuple[dict[str, int], set[str]]:
    """``({source SHA-256: bytes}, {SHA-256 of the lower bounds})`` from ``path``; empty where it is missing, too
    large, unreadable or malformed (entries that are not a 64-digit hex key with an integer of at least -1 are
    dropped)."""
    import json

    try:
        if path.stat().st_size > _SIZES_FILE_MAX_BYTES:
            return {}, set()
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}, set()
    if not isinstance(data, dict) or not isinstance(data.get("sizes"), dict):
        return {}, set()
    hexdigits = set("0123456789abcdef")
    sizes = {k: v for k, v in data["sizes"].items() if isinstance(k, str) and len(k) == 64 and set(k) <= hexdigits
             and isinstance(v, int) and not isinstance(v, bool) and v >= -1}
    lower = data.get("lower")
    return sizes, ({k for k in lower if isinstance(k, str) and k in sizes} if isinstance(lower, list) else set())


def _write_sizes(path: Any, sizes: Mapping[str, int], lower: Any = ()) -> None:
    """Add ``sizes`` (``lower``: those of them that are lower bounds) to those in ``path``, read again just before
    under a lock beside it (``.lock``: two runs sharing the folder keep each other's); a complete size replaces a
    lower bound, and of two lower bounds the larger stands. Written through a new file renamed over the old (a
    reader sees one or the other; readable by all, as the build cache's other files); a failure to write is
    logged and otherwise ignored (the next run sizes again)."""
    import errno
    import fcntl
    import json
    import logging
    import os

    lower = set(lower)
    try:
        lock = os.open(str(path) + ".lock", os.O_RDONLY | os.O_CREAT, 0o666)  # (read-only: another user's lock file)
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)
            except OSError as e:  # a file system without locks: written unlocked, as before locks
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
            merged, was_lower = _read_sizes(path)
            for k, v in sizes.items():
                if k in lower:
                    if k in merged and k not in was_lower:
                        continue  # a complete size stands
                    merged[k] = max(v, merged.get(k, v))
                    was_lower.add(k)
                else:
                    merged[k] = v
                    was_lower.discard(k)
            # a fixed name under the lock: a writer killed midway leaves it for the next to overwrite
            tmp = str(path) + ".tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            except PermissionError:  # another user's left-over: a name of this writer's own
                import tempfile

                fd, tmp = tempfile.mkstemp(prefix=".sizes-", dir=str(path.parent))
            try:
                os.fchmod(fd, 0o644)
                with os.fdopen(fd, "w") as f:
                    json.dump({"sizes": merged, "lower": sorted(was_lower)}, f, sort_keys=True)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        finally:
            os.close(lock)
    except OSError as e:
        logging.getLogger(__name__).warning("could not keep the problems' sizes in %s: %s", path, e)


class _SizingChild:
    """One child of :class:`Sizing`: sizes ``codes`` in a process of its own.

    Args:
        codes: problem key (any string) -> the problem's source.
        limit_s: seconds a problem's model and forward may take (:data:`FORWARD_LIMIT_S`).
        keep: a sizes file the child itself adds what it sized completely to, at low priority (``nice`` 10);
            the background child of :class:`Sizing`, which nothing waits for.
    """

    def __init__(self, codes: Mapping[str, str], limit_s: float = FORWARD_LIMIT_S, keep: Any = None) -> None:
        import json
        import os
        import subprocess
        import sys
        import tempfile

        self.keys = set(map(str, codes))
        self._got: dict[str, int] | None = None
        self.cut: set[str] = set()  # keys the limit cut short while their model was built (not kept)
        self.lower: set[str] = set()  # keys it cut short in the forward (kept as lower bounds)
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self._proc: subprocess.Popen[str] | None = None
        with tempfile.TemporaryFile("w+") as f:  # the child's stdin: the sources can be MiBs (no pipe to fill)
            json.dump({"codes": dict(codes), "limit_s": float(limit_s), "keep": str(keep) if keep else None}, f)
            f.seek(0)
            try:  # its own process group: stop() kills whatever a problem started too (it could hold the pipes)
                self._proc = subprocess.Popen([sys.executable, "-m", "kernelbench_harness.schedule"], stdin=f,
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                              start_new_session=True)
            except OSError:
                self._got = {}

    def result(self, timeout_s: float = 120.0) -> dict[str, int]:
        """The sizes (see :func:`problem_sizes`), waiting up to ``timeout_s`` seconds for them; ``{}`` (and the
        child killed) past that or where the child failed."""
        import json
        import subprocess

        if self._got is not None:
            return self._got
        assert self._proc is not None
        try:  # past the limit (or a problem's process holding the pipes open): killed, no sizes
            out, _err = self._proc.communicate(timeout=timeout_s)
            self._kill_group()  # what a problem started and left running (the child itself has exited)
            got = json.loads(out.strip().splitlines()[-1]) if self._proc.returncode == 0 and out.strip() else {}
            cut = got.pop(_CUT, []) if isinstance(got, dict) else []
            self.cut = {str(k) for k in cut} if isinstance(cut, list) else set()
            lower = got.pop(_LOWER, []) if isinstance(got, dict) else []
            self.lower = {str(k) for k in lower} if isinstance(lower, list) else set()
        except subprocess.TimeoutExpired:
            self.stop()
            got = {}
        except (ValueError, IndexError):
            got = {}
        self._got = {str(k): int(v) for k, v in got.items()
                     if str(k) in self.keys and isinstance(v, int)} if isinstance(got, dict) else {}
        return self._got

    def _kill_group(self) -> bool:
        """SIGKILL to the child's process group (its own session: only what the child and the problems' code
        started). Returns False where there is no such group (nothing of it is left). (Pids are handed out in
        sequence: an exited child's is not taken again in the instant before this.)"""
        import os
        import signal

        if self._proc is None:
            return False
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
            return True
        except OSError:  # (ProcessLookupError: nothing of the group is left)
            return False

    def stop(self) -> None:
        """Kill the child and its process group (whatever a problem started) if it still runs; waits for
        the child's exit only (at most 5 s), not for its pipes."""
        import subprocess

        p = self._proc
        if p is not None:
            if p.poll() is None:
                if not self._kill_group():
                    p.kill()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            for pipe in (p.stdout, p.stderr):
                if pipe is not None:
                    pipe.close()
        if self._got is None:
            self._got = {}


def _main() -> None:
    """``python -m kernelbench_harness.schedule``: ``{"codes": {key: source}, "limit_s": seconds, "keep": a sizes
    file or null}`` on stdin (see :class:`_SizingChild`), the sizes as a JSON object on the last line of stdout."""
    import json
    import os
    import sys

    import torch

    import signal

    payload = json.loads(sys.stdin.read())
    codes, limit_s, keep = payload["codes"], float(payload["limit_s"]), payload.get("keep")
    if keep:  # the background child, which nothing waits for (Sizing is made in the run's main thread)
        from .execution.sandbox import die_with_parent

        die_with_parent()
        if os.getppid() == 1:  # the run was already gone
            os._exit(3)
        os.nice(10)  # the run's own work goes first
    import hashlib
    from pathlib import Path

    sizes: dict[str, int] = {}
    cut: list[str] = []  # the limit came while the model was built: sized by what was by then, not kept
    lower: list[str] = []  # it came in the forward: inputs and weights counted, not the outputs (a lower bound)
    signal.signal(signal.SIGALRM, _raise_timeout)  # each problem's limit (_problem_nbytes)
    with torch.no_grad():  # torch's one-time set-up for meta tensors, outside any problem's limit
        torch.nn.functional.linear(torch.ones(2, 2, device="meta"), torch.ones(2, 2, device="meta")).mul(2).sum()
    dtype = torch.get_default_dtype()
    for key, code in codes.items():
        try:
            with warnings.catch_warnings():  # the problems' own warnings belong to their evaluation
                warnings.simplefilter("ignore")
                sizes[key], cut_in = _problem_nbytes_cut(code, limit_s)
                if cut_in == "model":
                    cut.append(key)
                elif cut_in == "forward":
                    lower.append(key)
                elif keep and sizes[key] >= 0:  # kept at once: a run that ends first kills this child
                    _write_sizes(Path(keep), {hashlib.sha256(str(code).encode()).hexdigest(): sizes[key]})
        except BaseException:  # noqa: BLE001 - SystemExit and kin from a problem: that one is unsized
            sizes[key] = -1
        finally:  # what one problem changed of torch's defaults does not size the next
            torch.set_default_dtype(dtype)
            torch.set_default_device(None)
            torch.set_grad_enabled(True)
    sys.stdout.write("\n" + json.dumps({**sizes, _CUT: cut, _LOWER: lower}) + "\n")
    sys.stdout.flush()


def problem_nbytes(code: str) -> int:
    """Bytes of a problem's input set, its outputs and its model's weights, from meta tensors (no memory, no
    random numbers, no device): ``get_inputs()`` and ``Model(*get_init_inputs())`` run under
    ``torch.device("meta")``. Weights count: each slot holds them several times over (the candidate's model
    and its ablation copy, the reference and its float64 twin), and KernelBench's MLPs hold 4-8 GiB of them
    on inputs of a few MiB.

    Args:
        code: the problem's source (a KernelBench problem file: ``Model``, ``get_inputs``,
            ``get_init_inputs``).

    Returns:
        The input set's bytes plus the weights' and the outputs' (without the outputs where the forward
        cannot run on meta tensors, without the weights too where the model cannot be built there); -1 where
        even the inputs cannot be drawn there (the problem counts as small). :func:`problem_sizes` runs it in
        a child process with a limit on each problem's model and forward (:data:`FORWARD_LIMIT_S`).
    """
    with warnings.catch_warnings():  # the problems' own warnings belong to their evaluation, not here
        warnings.simplefilter("ignore")
        return _problem_nbytes(code, None)


class _ForwardTimeout(BaseException):
    """The sizing child's limit on one problem's model and forward (a ``BaseException``: a problem's own
    ``except Exception`` does not swallow it)."""


def _raise_timeout(signum: int, frame: object) -> None:
    raise _ForwardTimeout


def _problem_nbytes(code: str, forward_limit_s: float | None = None) -> int:
    return _problem_nbytes_cut(code, forward_limit_s)[0]


def _problem_nbytes_cut(code: str, forward_limit_s: float | None = None) -> tuple[int, str | None]:
    """``(bytes, cut_in)``: :func:`_problem_nbytes`, and where the limit cut the sizing short (twice): None (not
    cut), ``"model"`` (while the model was built: the bytes are the inputs' and what was counted by then, which
    depends on the host's load) or ``"forward"`` (the inputs and weights are counted, the outputs not)."""
    import torch

    from .execution.warm import meta_input_nbytes, module_nbytes, tensor_nbytes

    mod = types.ModuleType("kbench_problem_size")
    try:
        exec(compile(code, "<problem>", "exec"), mod.__dict__)
    except Exception:  # noqa: BLE001 - a broken problem is reported where it is evaluated
        return -1, False
    n_in = meta_input_nbytes(torch, mod)
    if n_in < 0:
        return -1, False
    import signal

    # the limit: a SIGALRM timer, for the sizing child only (_main installs the handler in its main thread; no
    # timer of a caller to keep), armed and disarmed inside the meta and no-grad contexts, so that it never lands in their entry or
    # exit and leaves torch's defaults changed; it interrupts Python code, not one long call into C++
    timed = forward_limit_s is not None and forward_limit_s > 0

    def attempt() -> tuple[int, str | None]:
        """(bytes sized, where the limit cut it: None, "model" or "forward")"""
        n = n_in
        where = "model"
        try:
            with torch.device("meta"), torch.no_grad():
                try:
                    if timed:
                        signal.setitimer(signal.ITIMER_REAL, forward_limit_s)
                    model = mod.Model(*mod.get_init_inputs())
                    n += module_nbytes(torch, model)
                    where = "forward"
                    out = model(*mod.get_inputs())
                finally:
                    if timed:
                        signal.setitimer(signal.ITIMER_REAL, 0)
            outs = out if isinstance(out, (list, tuple)) else [out]
            return n + tensor_nbytes(torch, outs), None
        except _ForwardTimeout:
            return n, where
        except Exception:  # noqa: BLE001 - an op without a meta kernel: what was sized so far
            return n, None

    got, cut = attempt()
    if cut and (forward_limit_s or 0) <= FORWARD_LIMIT_S:  # once more: torch's one-time set-up of an op on meta
        got, cut = attempt()  # tensors may have taken the limit (not with the background child's long one)
    return got, cut


def interleave_large(keys: Sequence[K], nbytes: Mapping[K, int], min_bytes: int = LARGE_PROBLEM_BYTES) -> list[K]:
    """``keys`` (problems, in their run order) with the large ones (``nbytes[key] >= min_bytes``) spread
    evenly among the others, largest first; the others keep their order. Every key appears once.

    Args:
        keys: distinct problem keys in the run's order.
        nbytes: bytes of each key's input set and outputs (:func:`problem_nbytes`); a missing key is small.
        min_bytes: the size from which a problem is large.
    """
    big = sorted((k for k in keys if nbytes.get(k, -1) >= min_bytes), key=lambda k: -nbytes[k])
    bigs = set(big)
    small = [k for k in keys if k not in bigs]
    n, b = len(keys), len(big)
    if not b or not small:
        return list(keys)
    out: list[K] = []
    bi = si = 0
    acc = n // 2  # Bresenham's spacing: a large key each n / b positions, the first after half a gap
    for _ in range(n):
        acc += b
        if bi < b and (acc >= n or si >= len(small)):
            acc -= n
            out.append(big[bi])
            bi += 1
        else:
            out.append(small[si])
            si += 1
    return out


if __name__ == "__main__":
    _main()
