"""The candidate process announces Triton JIT compiles to the trusted side (``worker._install_compile_notices``).

On a GPU a fresh process compiles every Triton kernel in its first call; the hooks tell the trusted side where
that host work begins and ends, so another slot's timing window need not wait for it (see
``test_gpu_yield.test_a_window_goes_on_beside_a_compile_announced_inside_the_first_call``). Triton's interpreter
(the CPU) compiles nothing, so these tests call the installed hooks as Triton's ``_do_compile`` does."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kernelbench_harness.execution import worker

knobs = pytest.importorskip("triton").knobs


class _FakeJob:
    def __init__(self, notice: bool = True) -> None:
        self.job = {"compile_notice": notice}
        self.device = SimpleNamespace(type="cpu")
        self.host_work_on = False
        self.host_work_t0 = 0.0
        self.sent: list[dict[str, Any]] = []
        self.phase_s: dict[str, float] = {}

    def sync(self) -> None:
        pass

    def _add_phase(self, name: str, seconds: float) -> None:
        self.phase_s[name] = self.phase_s.get(name, 0.0) + seconds

    def send(self, obj: dict[str, Any]) -> None:
        self.sent.append(obj)


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """Triton's runtime hooks restored after the test; a fake job to send the notices."""
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", None)
    monkeypatch.setattr(knobs.runtime, "jit_post_compile_hook", None)
    job = _FakeJob()
    monkeypatch.setattr(worker, "_NOTICE_JOB", [job])
    return job


class _Kernel:
    def __init__(self) -> None:
        self.loaded = 0

    def _init_handles(self) -> None:
        self.loaded += 1


def _compile_kwargs(kernel: _Kernel | None) -> dict[str, Any]:
    jf = SimpleNamespace(device_caches={3: ({"key-1": kernel} if kernel else {}, None, None, None, None)})
    return {"key": "key-1", "repr": "k", "fn": SimpleNamespace(jit_function=jf), "compile": {"device": 3},
            "is_manual_warmup": False, "already_compiled": False}


def test_a_compile_is_announced_around_it_and_its_kernel_loaded_inside(hooks: _FakeJob) -> None:
    assert worker._install_compile_notices()
    kernel = _Kernel()
    kw = _compile_kwargs(kernel)
    assert not knobs.runtime.jit_cache_hook(**kw)  # a true answer would skip Triton's compile
    assert hooks.sent == [{"event": "host_work", "on": True, "what": "triton_compile"}]
    assert kernel.loaded == 0
    knobs.runtime.jit_post_compile_hook(**kw)
    assert kernel.loaded == 1, "the launcher and module load were left to the launch, outside the notice"
    assert hooks.sent[-1] == {"event": "host_work", "on": False, "what": "triton_compile"}
    assert hooks.phase_s["jit_compiles"] == 1.0 and hooks.phase_s["jit_compile"] >= 0.0
    # a post-compile call with no stretch on sends nothing
    knobs.runtime.jit_post_compile_hook(**kw)
    assert len(hooks.sent) == 2


def test_hooks_already_set_are_still_called_and_their_answer_kept(hooks: _FakeJob,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", lambda **kw: calls.append("pre") or True)
    monkeypatch.setattr(knobs.runtime, "jit_post_compile_hook", lambda **kw: calls.append("post"))
    assert worker._install_compile_notices()
    kw = _compile_kwargs(None)
    assert knobs.runtime.jit_cache_hook(**kw) is True  # the earlier hook skips the compile: nothing announced
    assert hooks.sent == []
    knobs.runtime.jit_post_compile_hook(**kw)
    assert calls == ["pre", "post"] and hooks.sent == []


def test_a_kernel_that_fails_to_load_still_ends_the_notice(hooks: _FakeJob) -> None:
    class Bad(_Kernel):
        def _init_handles(self) -> None:
            raise RuntimeError("out of shared memory")

    assert worker._install_compile_notices()
    kw = _compile_kwargs(Bad())
    knobs.runtime.jit_cache_hook(**kw)
    knobs.runtime.jit_post_compile_hook(**kw)  # the launch raises it again where it matters
    assert [m["on"] for m in hooks.sent] == [True, False]


def test_no_notices_unless_the_job_asks(hooks: _FakeJob) -> None:
    hooks.job["compile_notice"] = False
    worker.host_work(True)
    worker.host_work(False)
    assert hooks.sent == []


def _counted_kernel(monkeypatch: pytest.MonkeyPatch, fake_run: Any) -> tuple[Any, Any]:
    """The worker's launch counter and compile notices installed over ``fake_run`` (standing for Triton's
    ``JITFunction.run``, which needs a GPU), with the interpreter's hook restored after the test; returns the
    counter and a fresh kernel."""
    import triton.runtime.interpreter as interp
    import triton.runtime.jit as jit

    monkeypatch.setattr(jit.JITFunction, "run", fake_run)
    monkeypatch.setattr(interp.InterpretedFunction, "run", interp.InterpretedFunction.run)  # restored after
    counter = worker._LaunchCounter()
    counter.install()
    monkeypatch.setattr(jit.JITFunction, "run", counter.installed["triton.JITFunction.run"][1])
    assert worker._install_compile_notices()

    @jit.jit
    def k(x):  # noqa: ANN001, ANN202
        pass

    return counter, k


def test_a_compiled_kernels_first_run_is_announced_from_its_start(hooks: _FakeJob,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Its first run sets Triton's driver and the kernel's binder up before the compile hook fires (0.6 s of the
    1.7 s first call in a fresh process on an H200 host): the stretch begins with the run, and the post-compile
    hook ends it; a later run is not announced; a run that raised still ends it."""
    import triton.runtime.jit as jit

    during: list[bool] = []
    compiled: set[int] = set()

    def fake_run(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        during.append(hooks.host_work_on)
        if kwargs.get("fail"):
            raise RuntimeError("no GPU")
        if id(self) not in compiled:  # as Triton: compiled once, from its kernel cache after
            compiled.add(id(self))
            knobs.runtime.jit_cache_hook(**_compile_kwargs(None))
            knobs.runtime.jit_post_compile_hook(**_compile_kwargs(None))
        return "launched"

    counter, k = _counted_kernel(monkeypatch, fake_run)
    assert k.run(1, grid=(1,), warmup=False) == "launched"
    assert during == [True], "the first run's set-up was outside the announced stretch"
    assert [m["on"] for m in hooks.sent] == [True, False] and not hooks.host_work_on
    assert k.run(1, grid=(1,), warmup=False) == "launched"
    assert during == [True, False] and len(hooks.sent) == 2  # a second run is not announced
    assert counter.triton == 2

    @jit.jit
    def k2(x):  # noqa: ANN001, ANN202
        pass

    with pytest.raises(RuntimeError, match="no GPU"):
        k2.run(1, grid=(1,), warmup=False, fail=True)
    assert [m["on"] for m in hooks.sent] == [True, False, True, False] and not hooks.host_work_on


def test_a_compile_that_raises_ends_its_stretch_with_the_run(hooks: _FakeJob, monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton calls the post-compile hook only after a compile that worked. An autotuner's config that does not
    compile raises inside a later run of a kernel that ran before, and the autotuner catches it: the stretch ends
    with that run, not with the call (the best config's launch is device work)."""

    def fake_run(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        knobs.runtime.jit_cache_hook(**_compile_kwargs(None))
        if kwargs.get("fail"):
            raise RuntimeError("PTXASError: too many resources")
        knobs.runtime.jit_post_compile_hook(**_compile_kwargs(None))
        return "launched"

    _counter, k = _counted_kernel(monkeypatch, fake_run)
    assert k.run(1, grid=(1,), warmup=False) == "launched"
    with pytest.raises(RuntimeError, match="PTXAS"):
        k.run(1, grid=(1,), warmup=False, fail=True)  # a second config, compiled in a later run
    assert not hooks.host_work_on, "the stretch stayed on after the compile raised"
    assert [m["on"] for m in hooks.sent] == [True, False, True, False]


def test_a_kernel_whose_module_failed_to_load_loads_again_at_its_launch(hooks: _FakeJob) -> None:
    """Triton sets the kernel's launcher before it loads the module: a load that failed (out of device memory)
    inside the hook must not leave a launcher beside no function, or the launch would not raise the real error."""
    import functools

    class Half(_Kernel):
        module = None

        def __init__(self) -> None:
            super().__init__()
            self._run = None

        def _init_handles(self) -> None:
            self._run = object()  # the launcher, made first
            raise RuntimeError("Triton Error [CUDA]: out of memory")

    class Limited(Half):
        def _init_handles(self) -> None:
            self._run = functools.partial(print, "kept for the launch")  # Triton's own error, raised there
            raise RuntimeError("out of resources: shared memory")

    assert worker._install_compile_notices()
    half, limited = Half(), Limited()
    for kern in (half, limited):
        kw = _compile_kwargs(kern)
        knobs.runtime.jit_cache_hook(**kw)
        knobs.runtime.jit_post_compile_hook(**kw)
    assert half._run is None, "the launch would use a launcher with no function"
    assert isinstance(limited._run, functools.partial)
    assert [m["on"] for m in hooks.sent] == [True, False, True, False]
