"""The torch.compile warm-up reports each problem as soon as its compile is done, so that problem's
timing can start while other references still compile; a failing reference is reported too."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from early import Early, in_child

from kernelbench_harness.core import Problem
from kernelbench_harness.execution.warm import warm_compile

GOOD = '''
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2.0
def get_inputs():
    return [torch.rand(8)]
def get_init_inputs():
    return []
'''
BAD = GOOD.replace("return [torch.rand(8)]", "raise RuntimeError('broken reference')")


def test_every_problem_is_reported_once_with_its_own_result():
    problems = [Problem(1, 1, "Good", GOOD, "1_Good.py"), Problem(1, 2, "Bad", BAD, "2_Bad.py")]
    seen: list[str] = []
    lock = threading.Lock()

    def on_done(key: str) -> None:
        with lock:
            seen.append(key)

    res = warm_compile(problems, precision="fp32", modes=[], no_grad=True, device_index=None, workers=2,
                       on_done=on_done)
    assert sorted(seen) == sorted(p.key for p in problems)  # each once
    assert "error" in res[problems[1].key] and "broken reference" in res[problems[1].key]["error"]
    assert res[problems[0].key] == {}


def test_a_failing_callback_does_not_stop_the_warm_up():
    problems = [Problem(1, 1, "Good", GOOD, "1_Good.py")]

    def on_done(key: str) -> None:
        raise ValueError("waiter gone")

    res = warm_compile(problems, precision="fp32", modes=[], no_grad=True, device_index=None, workers=1,
                       on_done=on_done)
    assert problems[0].key in res


def _run_with_warm_up_workers(tmp_path: Path):
    """The run of the test below (in a child interpreter, beside the tests before it: tests/early.py)."""
    import asyncio

    from kernelbench_harness.runner import RunConfig, execute_run

    cfg = RunConfig(model="bundled", levels=(1,), ids="1", run_name="warm", db=f"sqlite:///{tmp_path / 'kb.db'}",
                    gpus="cpu", build_cache=str(tmp_path / "cache"), warm_workers=1, timeout_s=120)
    return asyncio.run(execute_run(cfg))


def test_a_run_with_warm_up_workers_evaluates_after_each_problems_own_compile(warm_run):
    s = warm_run
    tmp_path = EARLY["warm_run"].folder
    assert s.outcomes == {"correct": 1}
    assert s.warm and all(k.startswith("_") or isinstance(v, dict) for k, v in s.warm.items())
    assert len([k for k in s.warm if not k.startswith("_")]) == 1  # the reference was warmed
    # the run records where its start-up went: before the executor, and the executor's own start
    from kernelbench_harness.store import Store

    st = Store(f"sqlite:///{tmp_path / 'kb.db'}", create=False)
    startup = st.get_run("warm").config["startup_s"]
    st.close()
    assert startup["process_to_executor"] > 0 and startup["executor"] > 0


HANG = GOOD.replace("return [torch.rand(8)]", "import time; time.sleep(60); return [torch.rand(8)]")


def test_a_hung_warm_up_is_ended_at_the_timeout():
    # a hung compile may hold the device's lock shared (warm.py): every timing window on the device would
    # wait behind it, so the pool's processes end at the timeout instead of being waited for
    import multiprocessing
    import time

    problems = [Problem(1, 1, "Hang", HANG, "1_Hang.py")]
    before = {p.pid for p in multiprocessing.active_children()}
    t0 = time.monotonic()
    res = warm_compile(problems, precision="fp32", modes=[], no_grad=True, device_index=None, workers=1,
                       timeout_s=3.0)
    assert time.monotonic() - t0 < 20.0  # not the 60 s the reference sleeps
    assert problems[0].key not in res
    time.sleep(0.5)
    left = [p for p in multiprocessing.active_children() if p.pid not in before]
    assert not left, left  # the hung worker was killed (active_children reaps the dead ones)


GATED_PROBE = r'''
import contextlib, json, sys
import torch
from kernelbench_harness.execution import warm
torch.manual_seed(0)
model = torch.nn.Linear(8, 4)  # one extern matmul: no C++ kernel to build (about 8 s of a 2-core CPU's)
x = torch.randn(3, 8)
entered = []

@contextlib.contextmanager
def gate():
    entered.append(1)
    yield

if sys.argv[1] == "gated":
    cm = warm._compile_gated(torch, model, "default", gate)
else:
    cm = torch.compile(model, mode="default")
with torch.no_grad():
    ok = all(torch.allclose(cm(x), model(x)) for _ in range(2))
from torch._dynamo.utils import counters
print(json.dumps({"gate": len(entered), "ok": ok, **dict(counters["inductor"])}))
'''


def _gated_then_plain(tmp_path: Path) -> dict:
    """The two probes of the test below, one after the other in a private cache (in a child interpreter,
    beside the tests before it: tests/early.py)."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    script = tmp_path / "probe.py"
    script.write_text(GATED_PROBE)

    def probe(kind: str) -> dict:
        p = subprocess.run([sys.executable, str(script), kind], capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1])

    gated = probe("gated")
    return {"gated": gated, "plain": probe("plain")}


def test_gated_warm_up_fills_the_cache_the_plain_compile_reads(gated_then_plain):
    # the warm-up compiles outside the device's lock and runs each compiled graph inside it (warm.py):
    # its backend must still write the FX-graph cache entry that the device slot's plain
    # torch.compile(model, mode=...) looks up, or the warm-up would be wasted
    gated, plain = gated_then_plain["gated"], gated_then_plain["plain"]
    assert gated["ok"] and gated["gate"] == 2  # each run of the compiled graph, and nothing else
    assert gated.get("fxgraph_cache_miss") == 1
    assert plain["ok"] and plain["gate"] == 0
    assert plain.get("fxgraph_cache_hit") == 1 and not plain.get("fxgraph_cache_miss")


def test_gated_compile_is_skipped_without_torchs_inductor_wrapper():
    import types

    assert __import__("kernelbench_harness.execution.warm", fromlist=["_compile_gated"])._compile_gated(
        types.SimpleNamespace(), object(), "default", None) is None


def test_benchmark_gate_is_undone_after_each_problem():
    # a benchmark patched to an earlier problem's gate would take the device's lock a second time from
    # inside a later problem's graph run and wait behind a timing window forever (session 9 on the H200)
    import contextlib

    import torch
    from torch._inductor.runtime import benchmarking

    from kernelbench_harness.execution.warm import _gate_benchmarks

    b = benchmarking.benchmarker
    calls: list[str] = []

    def fake(*a, **k):
        calls.append("bench")
        return 1.0

    def gate(name):
        @contextlib.contextmanager
        def g():
            calls.append(name)
            yield
        return g

    vars(b)["benchmark_gpu"] = fake
    try:
        undo1 = _gate_benchmarks(torch, gate("first"))
        b.benchmark_gpu(lambda: None)
        undo1()
        assert b.benchmark_gpu is fake
        undo2 = _gate_benchmarks(torch, gate("second"))
        b.benchmark_gpu(lambda: None)
        undo2()
        assert calls == ["first", "bench", "second", "bench"]
        assert b.benchmark_gpu is fake
    finally:
        vars(b).pop("benchmark_gpu", None)
    assert "benchmark_gpu" not in vars(b)  # the class's own method again


def test_a_model_with_a_graph_break_is_compiled_all_inside_the_lock(monkeypatch):
    # with graph breaks, the eager code between compiled graphs would run on the GPU outside the lock:
    # the gated compile asks for one whole graph, and a model that is not one is compiled again the
    # plain way, all of it inside one stretch of the lock (compile included)
    import contextlib

    import torch

    from kernelbench_harness.execution.warm import _compile_modes

    class Broken(torch.nn.Module):
        def forward(self, x):
            y = x * 2.0
            torch._dynamo.graph_break()
            return y + 1.0

    inside = [False]
    stretches: list[int] = []
    compiles: list[tuple[bool, bool]] = []  # (fullgraph asked, inside the lock) per torch.compile call
    real_compile = torch.compile

    def recording_compile(*a, **k):
        compiles.append((bool(k.get("fullgraph")), inside[0]))
        return real_compile(*a, **k)
    monkeypatch.setattr(torch, "compile", recording_compile)

    @contextlib.contextmanager
    def gate():
        stretches.append(1)
        inside[0] = True
        try:
            yield
        finally:
            inside[0] = False

    out: dict = {}
    torch._dynamo.reset()
    try:
        _compile_modes(torch, Broken(), [torch.randn(4)], ["default"], True, False, True, gate, [], out)
    finally:
        torch._dynamo.reset()
    assert isinstance(out["default"], float), out
    # the one-graph attempt outside the lock fails at tracing; the plain compile runs inside one stretch
    assert compiles == [(True, False), (False, True)]
    assert stretches == [1]


def test_the_warm_up_fills_the_callers_dict_as_problems_finish():
    problems = [Problem(1, 1, "Good", GOOD, "1_Good.py")]
    into: dict = {}
    seen_at_done: list[bool] = []

    def on_done(key: str) -> None:
        seen_at_done.append(key in into)  # already there when the caller hears of it

    res = warm_compile(problems, precision="fp32", modes=[], no_grad=True, device_index=None, workers=1,
                       on_done=on_done, results=into)
    assert res is into and problems[0].key in into and "_wall_s" in into
    assert seen_at_done == [True]


def test_warm_record_merges_an_interrupted_parts_compiles_and_marks_a_cut():
    from types import SimpleNamespace

    from kernelbench_harness.runner import _warm_record

    first = _warm_record(None, {"L2/1": {"default": 9.0}}, [0.0])  # cut: no _wall_s from warm_compile
    assert first["_cut"] is True and first["L2/1"] == {"default": 9.0} and len(first["_wall_s_parts"]) == 1
    resumed = SimpleNamespace(hardware={"warm": first})
    second = _warm_record(resumed, {"L2/2": {"default": 4.0}, "_wall_s": 12.5}, [0.0])
    assert second["L2/1"] == {"default": 9.0} and second["L2/2"] == {"default": 4.0}
    assert second["_wall_s"] == 12.5 and "_cut" not in second
    assert second["_wall_s_parts"] == [first["_wall_s"], 12.5]


def _run_cut_short(tmp_path: Path) -> str:
    """The run of the test below, cut while its first result is stored (in a child interpreter, beside the
    tests before it: tests/early.py); returns the store's URL."""
    import asyncio

    from kernelbench_harness.runner import RunConfig, execute_run
    from kernelbench_harness.store import Store

    def cut(self, *a, **k):
        raise KeyboardInterrupt  # Ctrl-C (or a budget's SIGINT) while the first result is stored

    db = f"sqlite:///{tmp_path / 'kb.db'}"
    cfg = RunConfig(model="bundled", levels=(1,), ids="1", run_name="warm-cut", db=db, gpus="cpu",
                    build_cache=str(tmp_path / "cache"), warm_workers=1, timeout_s=120)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Store, "record_attempt", cut)
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(execute_run(cfg))
    return db


def test_a_run_cut_short_keeps_the_compiles_it_finished(warm_cut_db):
    from kernelbench_harness.store import Store

    st = Store(warm_cut_db)
    try:
        run = st.get_run("warm-cut")
        assert run.status == "interrupted"
        warm = run.hardware["warm"]
        assert any(k.startswith("L1/") for k in warm) and warm["_wall_s_parts"]
    finally:
        st.close()


def test_large_warm_ups_run_one_at_a_time_per_device(tmp_path, monkeypatch):
    import tempfile
    import time

    from kernelbench_harness.execution import warm

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    held = threading.Event()
    release = threading.Event()

    def first() -> None:
        with warm._alone_on_device("gpu-uuid-a"):
            held.set()
            release.wait(10)

    t = threading.Thread(target=first)
    t.start()
    assert held.wait(10)
    threading.Timer(0.3, release.set).start()
    with warm._alone_on_device("gpu-uuid-b") as waited_other:  # another device: not held up
        assert waited_other < 0.2
    t0 = time.perf_counter()
    with warm._alone_on_device("gpu-uuid-a") as waited:
        assert waited >= 0.2 and time.perf_counter() - t0 >= 0.2
    t.join(10)
    assert (tmp_path / "kbench-locks" / "gpu-uuid-a.warm-big.lock").exists()


def test_input_bytes_are_known_before_the_inputs_are_drawn():
    import types

    import torch

    from kernelbench_harness.execution import warm

    big = types.SimpleNamespace(get_inputs=lambda: [torch.rand(1 << 28), torch.randint(0, 3, (4,)), 7])
    assert warm.meta_input_nbytes(torch, big) == (1 << 30) + 4 * 8  # a GiB of float32, not allocated here

    def odd():
        return [torch.rand(4) * torch.rand(1).item()]  # a meta tensor has no value to read
    assert warm.meta_input_nbytes(torch, types.SimpleNamespace(get_inputs=odd)) == -1


# queued when the session is collected (tests/early.py): these runs and compiles are in processes of their own
def _compile_cache_checked(folder: Path) -> dict:
    """scripts/compile_cache_check.py: the warm-up, then the slot's baseline compile, each in a fresh process
    with one new inductor cache (in a child interpreter, beside the tests before it: tests/early.py)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "scripts" / "compile_cache_check.py"
    spec = importlib.util.spec_from_file_location("compile_cache_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # the script's own problem without its ReLU and affine tail: a graph of one extern matmul, with no C++ kernel
    # for inductor to build in each phase (35 s -> 14 s on 2 cores); the cache key (TF32 settings, inputs' metadata)
    # is the graph's either way: a warm-up without the slot's TF32 settings still misses (checked by hand)
    problem = folder / "1_Lin.py"
    problem.write_text(mod.SMALL.replace("torch.relu(self.lin(x)) * 2.0 + 1.0", "self.lin(x)"))
    assert "return self.lin(x)\n" in problem.read_text()
    return mod.check(problem_path=str(problem), cache_dir=str(folder / "inductor"))


def test_the_slots_compile_finds_what_the_warm_up_stored(compile_cache_checked):
    """Before, every slot's compile missed the warm-up's cache: the warm-up left TF32 at a fresh process's
    settings (matmul precision "none", in the key) where the slot set "ieee", and a memory format's pickle in the
    key named whichever module pickle found first (``__mp_main__`` in the spawned warm-up)."""
    r = compile_cache_checked
    assert r["error"] is None and r["warm"].get("default") is not None, r
    assert r["fxgraph_cache_hit"] == 1 and r["fxgraph_cache_miss"] == 0, r
    assert r["aot_autograd"].get("autograd_cache_hit") == 1, r


EARLY = {"compile_cache_checked": Early(in_child(_compile_cache_checked)),
         "warm_run": Early(in_child(_run_with_warm_up_workers)),
         "gated_then_plain": Early(in_child(_gated_then_plain)),
         "warm_cut_db": Early(in_child(_run_cut_short))}


@pytest.fixture
def compile_cache_checked():
    return EARLY["compile_cache_checked"].result()


@pytest.fixture
def warm_run():
    return EARLY["warm_run"].result()


@pytest.fixture
def gated_then_plain() -> dict:
    return EARLY["gated_then_plain"].result()


@pytest.fixture
def warm_cut_db() -> str:
    return EARLY["warm_cut_db"].result()


def test_compile_threads_give_each_process_twice_its_share_up_to_every_cpu():
    from kernelbench_harness.execution.warm import compile_threads

    assert compile_threads(16, 8) == 4  # eight warm-ups on an H200 host's 16 CPUs (was 2 each)
    assert compile_threads(16, 1) == 16  # a lone compile gets them all
    assert compile_threads(16, 3) == 10
    assert compile_threads(2, 1) == 2
    assert compile_threads(3, 8) == 1  # never below one
    assert compile_threads(128, 1) == 32  # inductor's own cap


def test_a_lone_problem_compiles_with_every_cpu(monkeypatch):
    """One problem to warm with eight processes asked for: one process, with the compile threads of all the CPUs
    (session 20: L3/16 alone had 2 of 16 and did not finish in 275 s)."""
    import os

    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    problems = [Problem(1, 1, "Good", GOOD, "1_Good.py")]
    res = warm_compile(problems, precision="fp32", modes=[], no_grad=True, device_index=None, workers=8)
    assert res["_compile_threads"] == len(os.sched_getaffinity(0))
    assert res[problems[0].key] == {}
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "3")  # the user's setting wins, and is what is recorded
    assert warm_compile(problems, precision="fp32", modes=[], no_grad=True, device_index=None,
                        workers=8)["_compile_threads"] == 3
