"""Do the candidate process's compile notices fire with this machine's Triton (issue 7)?

Installs ``worker._install_compile_notices`` in a fresh process with a stand-in job that records what it
would send, then calls a one-line Triton copy kernel twice. Prints one JSON line: Triton's version, whether
the hooks were installed, the notices in order with their times (s since the first call began), the first
and second call's wall seconds, and the seconds between the ``off`` notice and the end of the first call
(what is left outside the announced stretch: the launch, and the launcher and module load if the hook
could not do them). Needs torch with CUDA and triton.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from types import SimpleNamespace


def main() -> None:
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="kb-notice-")  # an empty cache, as a candidate's
    import torch
    import triton
    import triton.language as tl

    from kernelbench_harness.execution import worker

    sent: list[tuple[float, dict]] = []
    t0 = [0.0]

    class Job:
        job = {"compile_notice": True}
        device = torch.device("cuda")
        host_work_on = False
        host_work_t0 = 0.0
        phase_s: dict[str, float] = {}

        def sync(self) -> None:
            torch.cuda.synchronize()

        def _add_phase(self, name: str, seconds: float) -> None:
            self.phase_s[name] = self.phase_s.get(name, 0.0) + seconds

        def send(self, obj: dict) -> None:
            sent.append((round(time.perf_counter() - t0[0], 4), obj))

    worker._NOTICE_JOB[0] = Job()
    installed = worker._install_compile_notices()

    @triton.jit
    def copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)

    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)
    torch.cuda.synchronize()
    calls = []
    for _ in range(2):
        t0[0] = t0[0] or time.perf_counter()
        t = time.perf_counter()
        copy[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        torch.cuda.synchronize()
        calls.append(round(time.perf_counter() - t, 4))
    off = [at for at, m in sent if m.get("on") is False]
    print(json.dumps({"triton": triton.__version__, "installed": installed, "notices": sent,
                      "first_call_s": calls[0], "second_call_s": calls[1],
                      "after_off_s": round(calls[0] - off[0], 4) if off else None,
                      "ok": bool(torch.equal(x, y)), "phase_s": Job.phase_s,
                      "hooks": SimpleNamespace(pre=str(triton.knobs.runtime.jit_cache_hook),
                                               post=str(triton.knobs.runtime.jit_post_compile_hook)).__dict__}))


if __name__ == "__main__":
    main()
