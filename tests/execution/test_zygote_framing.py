"""The fork server receives jobs of any size intact (a stream socket may split a large request)."""

from __future__ import annotations

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
            job = {"mode": "probe", "job_dir": str(tmp_path), "inputs_dir": str(tmp_path), "device": "cpu",
                   "protocol": {}, "padding": "é" * size + str(n)}
            h = launcher.start(job, None)
            try:
                msg = h.chan.recv(timeout_s=60)
                while msg.get("event") != "probe":
                    msg = h.chan.recv(timeout_s=60)
            finally:
                h.close()
            assert msg["ok"] is True
        # no fallback: the zygote itself served every request
        assert launcher.method == "zygote" and launcher._zygote.poll() is None
    finally:
        launcher.close()
