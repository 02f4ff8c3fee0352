"""The fork server receives jobs of any size intact (a stream socket may split a large request)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from kernelbench_harness.execution.process import Launcher
from kernelbench_harness.execution.sandbox import clean_environment


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork server is Linux-only")
@pytest.mark.parametrize("size", [100, 40_000, 3_000_000])
def test_large_jobs_reach_the_zygote_whole(tmp_path, size):
    env = clean_environment(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    launcher = Launcher(env, method="zygote")
    try:
        assert launcher.method == "zygote"
        for n in range(2):  # the control stream stays in step across requests
            assert _probe(launcher, tmp_path, padding="é" * size + str(n))["ok"] is True
        # no fallback: the zygote itself served every request
        assert launcher.method == "zygote" and launcher._zygote.poll() is None
    finally:
        launcher.close()


def _probe(launcher: Launcher, tmp_path, **extra) -> dict:
    """Start a probe job through ``launcher`` and return its answer."""
    job = {"mode": "probe", "job_dir": str(tmp_path), "inputs_dir": str(tmp_path), "device": "cpu", "protocol": {},
           **extra}
    h = launcher.start(job, None)
    try:
        msg = h.chan.recv(timeout_s=60)
        while msg.get("event") != "probe":
            msg = h.chan.recv(timeout_s=60)
    finally:
        h.close()
    return msg


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork server is Linux-only")
def test_the_fork_server_is_awaited_at_the_first_start_and_one_that_never_gets_ready_falls_back_to_spawn(
        tmp_path, monkeypatch):
    """The constructor does not wait for the fork server's ready line (its torch import held the runner's event
    loop about 2 s before the first job, in runs that then built nothing); the first start reads it. A server
    that never says ready is stopped and candidates start with spawn."""
    env = clean_environment(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    reads: list[float | None] = []
    real = Launcher._read_ctrl_line
    monkeypatch.setattr(Launcher, "_read_ctrl_line", lambda self, timeout_s: reads.append(timeout_s) or real(self, timeout_s))
    launcher = Launcher(env, method="zygote")
    try:
        assert reads == [] and launcher._zygote_ready is False  # nothing read yet
        assert _probe(launcher, tmp_path)["ok"] is True
        assert reads[0] == 120 and launcher._zygote_ready and launcher.method == "zygote"
    finally:
        launcher.close()

    monkeypatch.setattr(Launcher, "_read_ctrl_line", lambda self, timeout_s: None)  # "ready" never comes
    launcher = Launcher(env, method="zygote")
    try:
        zygote = launcher._zygote
        assert _probe(launcher, tmp_path)["ok"] is True  # served by a spawned process
        assert launcher.method == "spawn" and zygote.poll() is not None  # the server was stopped
    finally:
        launcher.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork server is Linux-only")
def test_a_closed_launcher_starts_nothing_even_when_closed_during_its_first_start(tmp_path, monkeypatch):
    """close() while a first start waits for the fork server's ready line: that start (and any later one) raises
    ChannelClosed instead of falling back to a spawned process that close() never sees; a malformed ready line
    falls back to spawn instead of escaping start()."""
    import threading
    import time

    from kernelbench_harness.execution.channel import ChannelClosed

    env = clean_environment(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    launcher = Launcher(env, method="zygote")
    waiting = threading.Event()
    real = Launcher._read_ctrl_line

    def slow_read(self, timeout_s):
        waiting.set()
        time.sleep(0.5)  # close() lands here
        return real(self, timeout_s)

    monkeypatch.setattr(Launcher, "_read_ctrl_line", slow_read)
    got: list[BaseException] = []

    def first_start() -> None:
        try:
            _probe(launcher, tmp_path)
        except BaseException as e:  # noqa: BLE001 - what the test looks at
            got.append(e)

    t = threading.Thread(target=first_start)
    t.start()
    assert waiting.wait(30)
    launcher.close()
    t.join(30)
    assert len(got) == 1 and isinstance(got[0], ChannelClosed) and launcher._popen == {}
    with pytest.raises(ChannelClosed):
        _probe(launcher, tmp_path)

    monkeypatch.setattr(Launcher, "_read_ctrl_line", lambda self, timeout_s: json.loads("{not json"))
    launcher = Launcher(env, method="zygote")
    try:
        assert _probe(launcher, tmp_path)["ok"] is True and launcher.method == "spawn"
    finally:
        launcher.close()
