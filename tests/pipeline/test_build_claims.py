"""The build pool's extension claims (BuildPool._serve_claim, _store_binary, the job loop): the paths review
found wrong, each a test that failed before its fix."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kernelbench_harness.execution.builder import BuildPool

NAME = "kb_" + "0123456789abcdef01234567"


class _Chan:
    def __init__(self, msgs: list[dict[str, Any]]) -> None:
        self.msgs = list(msgs)
        self.sent: list[dict[str, Any]] = []

    def recv(self, timeout_s: float | None = None) -> dict[str, Any]:
        return self.msgs.pop(0)

    def send(self, msg: dict[str, Any]) -> None:
        self.sent.append(msg)


class _Handle:
    def __init__(self, msgs: list[dict[str, Any]]) -> None:
        self.chan = _Chan(msgs)
        self.killed = ""
        self.closed = False

    def kill(self, reason: str) -> None:
        self.killed = reason

    def wait_exit(self, timeout_s: float = 10.0) -> int:
        return 0

    def close(self) -> None:
        self.closed = True


def test_waiters_for_a_claim_that_ended_without_a_binary_compile_side_by_side(tmp_path: Path) -> None:
    """The claimant's compile failed (or its process was ended): every process that waited for it got woken and
    one of them took the claim, the others waiting again for its compile of the same failing source, so N
    candidates with one bad extension compiled it one after another and the last ones ran out of time (a
    build timeout instead of their compile error)."""
    pool = BuildPool(tmp_path / "cache", workers=3, scratch_dir=tmp_path / "s")
    try:
        first: set[str] = set()
        assert pool._serve_claim(NAME, first, time.monotonic() + 60) == "ext_go"
        answers: list[str] = []
        held = [set(), set()]
        waiters = [threading.Thread(target=lambda h=h: answers.append(pool._serve_claim(NAME, h,
                                                                                         time.monotonic() + 60)))
                   for h in held]
        for t in waiters:
            t.start()
        time.sleep(0.3)
        assert answers == []
        pool._release_claims(first)  # its compile failed: nothing stored
        for t in waiters:
            t.join(2)
        assert answers == ["ext_go", "ext_go"], "a waiter still waits for another's compile of a failing source"
        assert held == [set(), set()] and NAME not in pool._ext_busy
    finally:
        pool.close()


def test_a_store_that_fails_inside_the_job_loop_leaves_no_claim_behind(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool stores a shared binary inside the job's message loop (once its compile process has exited); an
    error there (a full disk, a file removed meanwhile) left the extension's claim in _ext_busy for good, so every
    later candidate with that extension waited until its own deadline and timed out; the process was not ended."""
    import inspect

    import torch.utils.cpp_extension as ce

    from kernelbench_harness.execution.build import shared_build_args

    ba = inspect.signature(ce.load_inline).bind(name="x", cpp_sources="int f() { return 1; }")
    ba.apply_defaults()
    args = shared_build_args(dict(ba.arguments))
    pool = BuildPool(tmp_path / "cache", workers=2, scratch_dir=tmp_path / "s")
    handles: list[_Handle] = []

    def start(job: dict[str, Any], sandbox: Any) -> _Handle:
        if job["mode"] == "compile_ext":
            so = Path(job["build_dir"]) / job["name"] / f"{job['name']}.so"
            so.parent.mkdir(parents=True)
            so.write_bytes(b"binary")
            handles.append(_Handle([{"event": "ext_compiled", "ok": True, "so": str(so)}]))
        else:
            handles.append(_Handle([{"event": "ext_request", "name": NAME, "args": args}]))
        return handles[-1]

    monkeypatch.setattr(pool.launcher, "start", start)

    def broken(*a: Any) -> None:
        raise PermissionError("x.so")

    monkeypatch.setattr(pool, "_store_binary", broken)
    from kernelbench_harness.core import Backend, Candidate

    try:
        with pytest.raises(PermissionError):
            pool._build_sync(Candidate(1, 1, "import torch\n", Backend.CPP))
        assert handles[0].chan.sent == []
        assert not pool._ext_busy, "the claim outlived its job"
        assert handles[0].killed and handles[0].closed and handles[1].closed
    finally:
        pool.close()


def test_a_binary_swapped_for_a_link_after_it_was_looked_at_is_not_copied(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """ext_done arrived while the build process still ran: it could name a regular file in its folder and swap
    it for a link to any file the harness can read (a key, /dev/zero, a FIFO) between the pool's checks and its
    copy, which followed the link: the file's bytes went into the shared cache for other candidates to read. (The
    pool's own compile process has exited before its binary is copied now; the copy still trusts no path.)"""
    pool = BuildPool(tmp_path / "cache", workers=2, scratch_dir=tmp_path / "s")
    job = tmp_path / "job"
    (job / "b").mkdir(parents=True)
    so = job / "b" / f"{NAME}.so"
    so.write_bytes(b"binary")
    secret = tmp_path / "secret"
    secret.write_bytes(b"api key")
    real_resolve = Path.resolve
    swapped: list[bool] = []

    def resolve(self: Path, strict: bool = False) -> Path:
        out = real_resolve(self, strict)
        if self == so and not swapped:  # the candidate's process swaps the file right after it is looked at
            swapped.append(True)
            so.unlink()
            os.symlink(secret, so)
        return out

    monkeypatch.setattr(Path, "resolve", resolve)
    try:
        pool._store_binary(NAME, so, job)
        stored = list((tmp_path / "cache" / NAME).glob("*")) if (tmp_path / "cache" / NAME).is_dir() else []
        assert all(p.read_bytes() != b"api key" for p in stored), "a file outside the job's folder was stored"
    finally:
        monkeypatch.undo()
        pool.close()


def test_a_binary_is_still_stored_from_the_jobs_folder(tmp_path: Path) -> None:
    pool = BuildPool(tmp_path / "cache", workers=2, scratch_dir=tmp_path / "s")
    job = tmp_path / "job"
    (job / "b").mkdir(parents=True)
    so = job / "b" / f"{NAME}.so"
    so.write_bytes(b"binary")
    try:
        pool._store_binary(NAME, so, job)
        assert (tmp_path / "cache" / NAME / so.name).read_bytes() == b"binary"
        assert NAME in pool._so_seen
        link = job / "b" / "link.so"
        os.symlink(so, link)  # a link, even to its own file: not followed
        other = "kb_" + "f" * 24
        pool._store_binary(other, link, job)
        assert not (tmp_path / "cache" / other).exists()
        assert not list((tmp_path / "cache").glob(".*.tmp"))
    finally:
        pool.close()
