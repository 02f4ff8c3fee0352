"""The order a run hands problems to slots that share one GPU: large problems spread among small ones
(H200 session 13: in problem order, level 1's large problems ran back to back and the other slots waited
for memory behind them)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from early import Early, in_child

from kernelbench_harness.schedule import LARGE_PROBLEM_BYTES, interleave_large, problem_nbytes, problem_sizes

GIB = 1 << 30

ELEMENTWISE = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
               "def get_inputs():\n    return [torch.rand(4096, N)]\ndef get_init_inputs():\n    return []\n")


def test_problem_bytes_are_its_inputs_and_outputs_from_meta_tensors():
    # 6 GiB in and 6 GiB out, with nothing allocated (this machine has far less free memory than that)
    assert problem_nbytes(ELEMENTWISE.replace("N", "393216")) == 12 * GIB
    reduction = ELEMENTWISE.replace("return x * 2", "return x.sum(dim=1)").replace("N", "1024")
    assert problem_nbytes(reduction) == 4096 * 1024 * 4 + 4096 * 4
    # an op without a meta kernel: the inputs alone; a problem that does not run: -1 (small)
    no_meta = ELEMENTWISE.replace("return x * 2", "return torch.tensor(x.tolist())").replace("N", "8")
    assert problem_nbytes(no_meta) == 4096 * 8 * 4
    assert problem_nbytes("raise ValueError('broken')") == -1
    assert problem_nbytes(ELEMENTWISE.replace("torch.rand(4096, N)", "open('/nonexistent')")) == -1
    # the model's weights count (KernelBench's MLPs: 4-8 GiB of them on a few MiB of inputs)
    linear = ELEMENTWISE.replace("    def forward", "    def __init__(self):\n        super().__init__()\n"
                                 "        self.fc = torch.nn.Linear(N, 16)\n    def forward") \
        .replace("return x * 2", "return self.fc(x)").replace("N", "1024")
    assert problem_nbytes(linear) == 4096 * 1024 * 4 + (1024 * 16 + 16) * 4 + 4096 * 16 * 4


def test_large_problems_are_spread_evenly_largest_first():
    keys = [f"p{i}" for i in range(20)]
    sizes = {k: 1 for k in keys}
    sizes.update({"p0": 3 * GIB, "p1": 8 * GIB, "p2": 4 * GIB, "p3": 16 * GIB})  # back to back, as level 1
    order = interleave_large(keys, sizes)
    assert sorted(order) == sorted(keys)
    big_at = [i for i, k in enumerate(order) if sizes[k] >= LARGE_PROBLEM_BYTES]
    assert [order[i] for i in big_at] == ["p3", "p1", "p2", "p0"]  # largest first
    gaps = [b - a for a, b in zip(big_at, big_at[1:])]
    assert min(gaps) >= 4 and max(gaps) <= 6  # about 20 / 4 apart: never two in a row
    assert [k for k in order if sizes[k] < LARGE_PROBLEM_BYTES] == keys[4:]  # the others keep their order


@pytest.mark.parametrize("n_big", [0, 1, 5, 19, 20])
def test_every_key_once_whatever_the_mix(n_big):
    keys = list(range(20))
    sizes = {k: (GIB * 3 if k < n_big else 0) for k in keys}
    order = interleave_large(keys, sizes)
    assert sorted(order) == keys
    if n_big in (0, 20):
        assert order == keys  # nothing to spread
    if n_big == 1:
        assert 5 <= order.index(0) <= 14  # not first, not last


def test_level1_of_kernelbench_spreads_its_large_problems():
    root = Path(os.environ.get("KBENCH_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "kernelbench" / "level1"
    if not root.is_dir():
        pytest.skip("KernelBench level 1 is not under KBENCH_SHARED")
    files = sorted(root.glob("*.py"), key=lambda p: int(p.name.split("_")[0]))
    sizes = {int(p.name.split("_")[0]): problem_nbytes(p.read_text()) for p in files}
    big = [k for k, v in sizes.items() if v >= LARGE_PROBLEM_BYTES]
    assert 40 <= len(big) <= 80 and sizes[45] >= 16 * GIB  # the 1-16 GiB problems (L1/45: a 16 GiB set)
    order = interleave_large(list(sizes), sizes)
    runs = max(len(r) for r in "".join("B" if sizes[k] >= LARGE_PROBLEM_BYTES else "s" for k in order).split("s"))
    assert runs <= 2  # in problem order, 21 large problems came back to back (from L1/19)


def test_a_runs_samples_of_one_problem_stay_together():
    from types import SimpleNamespace

    from kernelbench_harness.runner import _interleave_todo

    def spec(pid: int, sample: int, n: str):
        code = ELEMENTWISE.replace("N", n)
        return (SimpleNamespace(problem=SimpleNamespace(level=1, problem_id=pid, code=code, key=f"L1/{pid}"),
                                sample_id=sample), 0)

    todo = [spec(pid, s, "393216" if pid in (1, 2) else "8") for pid in range(1, 9) for s in range(2)]
    phase: dict[str, float] = {}
    out, lane = _interleave_todo(todo, phase)
    assert sorted(map(id, out)) == sorted(map(id, todo)) and phase["schedule"] >= 0.0
    assert lane == {"L1/1", "L1/2"}  # 12 GiB each: at least LANE_BYTES, one per GPU at a time
    pids = [x[0].problem.problem_id for x in out]
    assert all(pids[i] == pids[i + 1] for i in range(0, len(pids), 2))  # each problem's two samples in a row
    assert [x[0].sample_id for x in out] == [0, 1] * 8
    firsts = pids[::2]
    assert abs(firsts.index(1) - firsts.index(2)) >= 3  # the two 12 GiB problems apart


def _sized(_folder: Path) -> dict:
    """The sizings of the test below (in a child interpreter that drives them, beside the tests before it:
    tests/early.py); returns what the test checks."""
    import torch

    big = ELEMENTWISE.replace("N", "393216")
    codes = {
        "exits": "import sys\nsys.exit(3)\n",
        "float64": "import torch\ntorch.set_default_dtype(torch.float64)\n" + ELEMENTWISE.replace("N", "8"),
        "big": big,  # after the one that changed the default dtype: sized as float32 still
        "gpu": ELEMENTWISE.replace("torch.rand(4096, N)", "torch.rand(8, 8).cuda()"),
    }
    dtype = torch.get_default_dtype()
    sizes = problem_sizes(codes)
    seen: dict = {"dtype_before": dtype, "dtype_after": torch.get_default_dtype(), "sizes": sizes}
    # a forward that runs long on meta tensors (recurrent layers' Python decompositions): its inputs alone,
    # and the problems after it are still sized
    slow = ELEMENTWISE.replace("return x * 2", "while True:\n            pass").replace("N", "8")
    # one that catches every Exception does not swallow the limit
    swallows = ELEMENTWISE.replace("return x * 2", "while True:\n            try:\n                pass\n"
                                   "            except Exception:\n                pass").replace("N", "8")
    t0 = time.perf_counter()
    seen["slow_sizes"] = problem_sizes({"slow": slow, "swallows": swallows, "big": big})
    seen["slow_s"] = time.perf_counter() - t0
    # a problem that hangs: past the limit, no sizes at all (the run keeps its problem order)
    seen["hang_sizes"] = problem_sizes({"hangs": "while True:\n    pass\n", "big": big}, timeout_s=5.0)
    return seen


# queued when the session is collected (tests/early.py)
EARLY = {"sized": Early(in_child(_sized))}


@pytest.fixture
def sized() -> dict:
    return EARLY["sized"].result()


def test_problems_are_sized_in_a_child_process_that_nothing_escapes(sized: dict):
    sizes = sized["sizes"]
    assert sized["dtype_after"] == sized["dtype_before"]  # the driver's torch untouched
    assert sizes["exits"] == -1 and sizes["big"] == 12 * GIB and sizes["gpu"] == -1
    assert sizes["float64"] == 4096 * 8 * 8 * 2  # its own tensors in float64, in and out
    assert sized["slow_sizes"] == {"slow": 4096 * 8 * 4, "swallows": 4096 * 8 * 4, "big": 12 * GIB}
    assert sized["slow_s"] < 60
    assert sized["hang_sizes"] == {}


def test_only_slots_sharing_a_gpu_reorder_a_run():
    from kernelbench_harness.runner import _slots_share_a_gpu

    assert _slots_share_a_gpu([{"device": "cuda:0"}, {"device": "cuda:0"}])
    assert _slots_share_a_gpu([{"device": "cuda:0"}, {"device": "cuda:1"}, {"device": "cuda:1"}])
    assert not _slots_share_a_gpu([{"device": "cuda:0"}, {"device": "cuda:1"}])
    assert not _slots_share_a_gpu([{"device": "cpu"}, {"device": "cpu"}])  # CPU slots time in turn anyway
    assert not _slots_share_a_gpu([{"device": "ray:n1:cuda"}, {"device": "ray:n1:cuda"}])  # one GPU each
    assert not _slots_share_a_gpu([])


def test_sizes_started_early_are_the_ones_used_and_a_stopped_child_gives_none():
    from types import SimpleNamespace

    from kernelbench_harness.runner import _interleave_todo
    from kernelbench_harness.schedule import LANE_BYTES, Sizing

    codes = {"big": ELEMENTWISE.replace("N", "393216"), "mid": ELEMENTWISE.replace("N", "131072"),
             "small": ELEMENTWISE.replace("N", "8")}
    early = Sizing(codes)
    got = early.result(120)
    assert got["big"] == 12 * GIB and got["mid"] == 4 * GIB and got["small"] == 4096 * 8 * 4 * 2
    assert got["mid"] < LANE_BYTES <= got["big"]
    # _interleave_todo takes them rather than sizing again (a stub whose sizes differ from the real ones)
    todo = [(SimpleNamespace(problem=SimpleNamespace(level=1, problem_id=i, code=codes[k], key=k), sample_id=0), 0)
            for i, k in enumerate(codes)]
    stub = SimpleNamespace(keys=set(codes), result=lambda: {"big": 1, "mid": LANE_BYTES, "small": 1})
    _out, lane = _interleave_todo(todo, {}, stub)
    assert lane == {"mid"}
    stopped = Sizing({"slow": "import time\ntime.sleep(60)\n" + codes["small"]})
    t0 = time.perf_counter()
    stopped.stop()
    assert stopped.result() == {} and time.perf_counter() - t0 < 10
    assert stopped._proc.poll() is not None  # killed and reaped
    # a problem that starts a process of its own holding the pipes: stop() does not wait for it
    holder = Sizing({"spawns": "import subprocess\nsubprocess.Popen(['sleep', '60'])\nimport time\ntime.sleep(60)\n"})
    time.sleep(3)
    t0 = time.perf_counter()
    holder.stop()
    assert time.perf_counter() - t0 < 8 and holder._proc.poll() is not None


def test_runs_size_early_only_where_slots_share_a_gpu():
    from kernelbench_harness.runner import RunConfig
    from kernelbench_harness.runner import _start_sizing

    assert _start_sizing(RunConfig(gpus="cpu"), []) is None
    assert _start_sizing(RunConfig(executor="ray"), []) is None


def test_a_large_problems_samples_hold_at_most_a_quarter_of_the_places():
    """Many samples of one large problem (run one per GPU at a time) took every place of the run's limit while
    they waited for the GPU, and the other slots sat idle: they now hold at most a quarter."""
    import asyncio

    from kernelbench_harness.runner import SampleGate

    gate = SampleGate(8, {"big"})
    assert gate.lane_limit == 2 and SampleGate(2, {"big"}).lane_limit == 2 and SampleGate(40, {"b"}, 4).lane_limit == 10
    assert SampleGate(8, {"b"}, lane_gpus=8).lane_limit == 8
    with pytest.raises(ValueError):
        SampleGate(0)
    inflight = {"big": 0, "small": 0}
    peak = {"big": 0, "small": 0}
    small_done: list[str] = []

    async def go() -> None:
        release = asyncio.Event()

        async def sample(key: str) -> None:
            kind = "big" if key == "big" else "small"
            async with gate(key):
                inflight[kind] += 1
                peak[kind] = max(peak[kind], inflight[kind])
                if kind == "big":
                    await release.wait()  # waiting for the GPU's one large job at a time
                else:
                    await asyncio.sleep(0)
                    small_done.append(key)
                inflight[kind] -= 1

        tasks = [asyncio.create_task(sample("big")) for _ in range(20)]  # queued first, as a problem's samples are
        tasks += [asyncio.create_task(sample(f"small{i}")) for i in range(10)]
        await asyncio.sleep(0.05)
        assert peak["big"] == 2 and len(small_done) == 10  # the small problems' samples went on meanwhile
        release.set()
        await asyncio.gather(*tasks)

    asyncio.run(go())
    assert peak["big"] == 2 and peak["small"] <= 8


def test_a_process_a_problem_started_does_not_outlive_a_successful_sizing(tmp_path):
    """A problem's code that starts a process of its own (closing the pipes, so sizing still succeeds): the
    process is killed with the sizing child's process group once the sizes are read."""
    pidfile = tmp_path / "pid"
    spawns = ("import subprocess, sys\n"
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],\n"
              "                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
              f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n" + ELEMENTWISE.replace("N", "8"))
    assert problem_sizes({"spawns": spawns}) == {"spawns": 2 * 4096 * 8 * 4}
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":  # killed, not yet reaped by its parent (gone)
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        pytest.fail("the process a problem started outlived the sizing")


def test_the_gate_keeps_the_runs_order_and_its_places_through_cancellation():
    """Review of c0f1198: a large sample that waited for a place among the large ones joined the common queue
    behind every small sample, so the large problems, spread through the run, all ran in its tail."""
    import asyncio

    from kernelbench_harness.runner import SampleGate

    keys = [f"big{i}" if i % 10 == 5 else f"small{i}" for i in range(40)]  # spread, as _interleave_todo does
    gate = SampleGate(4, {k for k in keys if k.startswith("big")})
    started: list[str] = []

    async def go() -> None:
        async def sample(key: str) -> None:
            async with gate(key):
                started.append(key)
                await asyncio.sleep(0.002)

        await asyncio.gather(*(sample(k) for k in keys))
        # cancellation: a waiting sample gives up its turn, a running one its place
        hold = asyncio.Event()

        async def holds(key: str) -> None:
            async with gate(key):
                await hold.wait()
        running = [asyncio.create_task(holds(f"h{i}")) for i in range(4)]
        waiting = asyncio.create_task(holds("w"))
        await asyncio.sleep(0.01)
        assert gate._in == 4 and not waiting.done()
        waiting.cancel()
        running[0].cancel()
        await asyncio.sleep(0.01)
        assert gate._in == 3 and gate._waiters == []
        hold.set()
        await asyncio.gather(*running, return_exceptions=True)
        assert gate._in == 0 and gate._lane_in == 0

    asyncio.run(go())
    for k in keys:
        if k.startswith("big"):
            assert started.index(k) <= keys.index(k) + 4  # near its place in the run's order, not at the end


def test_sizing_in_several_children_gives_the_same_sizes_and_a_failed_child_gives_none(monkeypatch):
    """The problems dealt out to several children (H200 session 24: the sweep's first job waited 19.7 s for one
    child to size 250 problems) are sized as by one; one child failing leaves every problem small, as one child's
    failure did."""
    from kernelbench_harness.schedule import Sizing, sizing_workers

    codes = {f"p{i}": ELEMENTWISE.replace("N", str(8 << i)) for i in range(5)}
    # one child's sizes, known exactly (inputs and outputs: 4096 x N float32 each; one child sizes them so in
    # test_problems_are_sized_in_a_child_process_that_nothing_escapes): not sized again here in a child of its own
    one = {f"p{i}": 2 * 4096 * (8 << i) * 4 for i in range(5)}
    many = Sizing(codes, workers=3)
    assert len(many._children) == 3 and sorted(len(c.keys) for c in many._children) == [1, 2, 2]
    assert many.result(120) == one and len(one) == 5
    broken = Sizing({**codes, "exits": "import os\nos._exit(3)\n"}, workers=2)
    assert broken.result(120) == {}
    from kernelbench_harness import schedule

    with monkeypatch.context() as m:  # how many children, not what they do: none is started
        m.setattr(schedule, "_SizingChild", _InProcessChild)
        capped = Sizing(codes, workers=9)
        assert len(capped._children) == 5  # at most one per problem
    assert 1 <= sizing_workers(250) <= 8 and sizing_workers(1) == 1


class _InProcessChild:
    """A stand-in for schedule._SizingChild that sizes its problems in this process at once (problem_nbytes:
    for the tests of what is kept between runs, not of the child; no interpreter to start)."""

    def __init__(self, codes: dict) -> None:
        self.keys, self.cut, self.lower = set(codes), set(), set()
        self._sizes = {k: problem_nbytes(v) for k, v in codes.items()}

    def result(self, timeout_s: float = 120.0) -> dict:
        return dict(self._sizes)

    def stop(self) -> None:
        pass


def test_sizes_are_kept_between_runs_by_the_sources_hash_and_a_bad_file_is_ignored(tmp_path, monkeypatch):
    """With a cache folder, a run whose problems were sized before starts no child; a changed source is sized
    again; a file that is not sizes is ignored and written anew."""
    import json

    from kernelbench_harness import schedule
    from kernelbench_harness.schedule import Sizing

    codes = {"big": ELEMENTWISE.replace("N", "393216"), "small": ELEMENTWISE.replace("N", "8")}
    first = Sizing(codes, cache=tmp_path).result(120)
    assert first["big"] == 12 * GIB and len(first) == 2
    files = list(tmp_path.glob("sizes-v2-torch*.json"))
    assert len(files) == 1 and sorted(json.loads(files[0].read_text())["sizes"].values()) == sorted(first.values())

    # from here on the children size in this process (problem_nbytes, as the real child does): what is checked is
    # which problems the cache sends to a child, and the first sizing above went through a real one
    started: list[dict] = []
    monkeypatch.setattr(schedule, "_SizingChild", lambda c, **kw: started.append(c) or _InProcessChild(c))
    again = Sizing({"b2": codes["big"], "s2": codes["small"]}, cache=tmp_path)  # same sources, other keys
    assert again.result(120) == {"b2": first["big"], "s2": first["small"]} and started == []
    changed = Sizing({"big": codes["big"], "mid": ELEMENTWISE.replace("N", "131072")}, cache=tmp_path).result(120)
    assert [list(c) for c in started] == [["mid"]] and changed["mid"] == 4 * GIB and changed["big"] == 12 * GIB
    assert len(json.loads(files[0].read_text())["sizes"]) == 3  # the new source kept beside the others

    files[0].write_text('{"sizes": {"not a hash": 1, "' + "0" * 64 + '": "x"}, "lower": 3}')
    started.clear()
    assert Sizing(codes, cache=tmp_path).result(120) == first and len(started) == 1  # sized again
    assert len(json.loads(files[0].read_text())["sizes"]) == 2
    files[0].write_text('{"' + "0" * 64 + '": 5}')  # the first format: ignored
    assert Sizing(codes, cache=tmp_path).result(120) == first and len(started) == 2
    files[0].write_text("[1, 2")  # not JSON
    assert Sizing(codes, cache=tmp_path).result(120) == first


def test_a_size_cut_short_in_the_forward_is_kept_as_a_lower_bound_and_sized_again_in_the_background(
        tmp_path, monkeypatch):
    """A size the limit cut short in the forward (inputs and weights counted, not the outputs) is kept as a lower
    bound: the next run uses it without waiting (L3/35-42 were sized again in every run, one child holding the
    first job back about 16 s on the H200, session 25), and sizes it again in a background child with a longer
    limit, which keeps the complete size for the runs after. One cut while the model was built depends on the
    host's load: used by the run, not kept. A complete size replaces a lower bound; of two lower bounds the larger
    stands. A child that cannot start stops those started before it."""
    import json

    from kernelbench_harness import schedule
    from kernelbench_harness.schedule import Sizing

    weights = ("    def __init__(self):\n        super().__init__()\n        self.fc = torch.nn.Linear(8, 8)\n"
               "    def forward")
    base = ELEMENTWISE.replace("    def forward", weights).replace("N", "8")
    # (past FORWARD_LIMIT_S, 1 s; the background child, with its longer limit, waits out slow_forward's sleep)
    slow_forward = base.replace("return x * 2", "import time\n        time.sleep(1.5)\n        return x * 2")
    slow_model = base.replace("super().__init__()", "super().__init__()\n        import time\n        time.sleep(3)")
    assert schedule.FORWARD_LIMIT_S < 1.5
    assert "time.sleep(1.5)" in slow_forward and "time.sleep(3)" in slow_model
    codes = {"slow_forward": slow_forward, "slow_model": slow_model, "small": ELEMENTWISE.replace("N", "8")}
    first = Sizing(codes, workers=1, cache=tmp_path)
    got = first.result(120)
    inputs, fc = 4096 * 8 * 4, (8 * 8 + 8) * 4
    assert got == {"slow_forward": inputs + fc, "slow_model": inputs, "small": 2 * inputs}  # no outputs where cut
    assert first.refine is None
    path = next(tmp_path.glob("sizes-v2-torch*.json"))
    kept = json.loads(path.read_text())
    assert sorted(kept["sizes"].values()) == sorted([inputs + fc, 2 * inputs])  # not slow_model's
    digest = next(k for k, v in kept["sizes"].items() if v == inputs + fc)
    assert kept["lower"] == [digest]

    started: list[tuple[list[str], dict]] = []
    real = schedule._SizingChild
    monkeypatch.setattr(schedule, "_SizingChild", lambda c, **kw: started.append((list(c), kw)) or real(c, **kw))
    again = Sizing(codes, workers=1, cache=tmp_path)
    assert again.result(120) == got  # the lower bound used at once: not waited for
    assert [c for c, _ in started] == [["slow_model"], ["slow_forward"]]
    assert started[1][1]["limit_s"] == schedule.REFINE_LIMIT_S and started[1][1]["keep"] == path
    assert again.refine is not None and again.refine._proc.wait(60) == 0
    kept = json.loads(path.read_text())
    assert kept["sizes"][digest] == inputs + fc + inputs and kept["lower"] == []  # complete now: outputs counted
    started.clear()
    # (without slow_model, sized again by every run as `again` showed: no child needed here)
    third = Sizing({k: codes[k] for k in ("slow_forward", "small")}, workers=1, cache=tmp_path)
    assert third.refine is None and third.result(120) == {"slow_forward": inputs + fc + inputs, "small": 2 * inputs}
    assert started == []  # the complete size is used and not sized again

    other = "f" * 64
    schedule._write_sizes(path, {other: 10}, lower={other})
    schedule._write_sizes(path, {other: 7}, lower={other})  # another run's smaller lower bound
    schedule._write_sizes(path, {digest: 1}, lower={digest})  # a lower bound never replaces a complete size
    kept = json.loads(path.read_text())
    assert kept["sizes"][other] == 10 and kept["lower"] == [other] and kept["sizes"][digest] == 2 * inputs + fc
    schedule._write_sizes(path, {other: 4})  # a complete size replaces a lower bound, larger or not
    kept = json.loads(path.read_text())
    assert kept["sizes"][other] == 4 and kept["lower"] == []

    stopped: list[int] = []

    class Child:
        made = 0

        def __init__(self, codes):
            Child.made += 1
            if Child.made == 2:
                raise OSError("no space left for the child's stdin")
            self.keys, self.cut = set(codes), set()

        def stop(self):
            stopped.append(1)

    monkeypatch.setattr(schedule, "_SizingChild", Child)
    with pytest.raises(OSError):
        Sizing(codes, workers=2)
    assert stopped == [1]


def test_runs_writing_the_sizes_file_at_once_keep_each_others_sizes(tmp_path):
    """The read, merge and rename happen under a lock beside the file: without it, two writers at once dropped
    each other's new sizes (review helper-59: 214 of 400 kept)."""
    import json
    import multiprocessing

    from kernelbench_harness import schedule

    path = tmp_path / "sizes-v2-torchX.json"

    def write(tag: str) -> None:
        for i in range(60):
            schedule._write_sizes(path, {f"{tag}{i:063d}": i})

    procs = [multiprocessing.get_context("fork").Process(target=write, args=(t,)) for t in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(json.loads(path.read_text())["sizes"]) == 120


def test_the_background_child_keeps_each_problem_it_completes_before_it_is_stopped(tmp_path):
    """A run shorter than the whole background sizing still keeps what it completed (review helper-60: it kept
    all or nothing, so short runs did the same work again and again); a failed sizing of the run's own problems
    does not stop it."""
    import hashlib
    import json
    import time

    from kernelbench_harness import schedule
    from kernelbench_harness.schedule import Sizing

    def slow(seconds: int, n: int) -> str:
        return ELEMENTWISE.replace("return x * 2", f"import time\n        time.sleep({seconds})\n        return x * 2"
                                   ).replace("N", str(n))

    codes = {"short": slow(2, 8), "long": slow(60, 16)}
    # both kept as lower bounds (their inputs), as a run the forward limit cut short keeps them (a child of its
    # own did that here before: test_a_size_cut_short_in_the_forward_is_kept_as_a_lower_bound_... checks it)
    path = schedule._sizes_file(tmp_path)
    digest = {k: hashlib.sha256(v.encode()).hexdigest() for k, v in codes.items()}
    schedule._write_sizes(path, {digest["short"]: 4096 * 8 * 4, digest["long"]: 4096 * 16 * 4},
                          lower=set(digest.values()))
    assert len(json.loads(path.read_text())["lower"]) == 2
    again = Sizing({**codes, "exits": "import os\nos._exit(3)\n"}, workers=1, cache=tmp_path)
    assert again.result(120) == {}  # its own child failed: no sizes for the run ...
    assert again.refine is not None and again.refine._proc.poll() is None  # ... and the background child goes on
    try:
        deadline = time.monotonic() + 60
        while len(json.loads(path.read_text())["lower"]) != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        again.stop()
    kept = json.loads(path.read_text())
    assert len(kept["lower"]) == 1 and sorted(kept["sizes"].values()) == [4096 * 8 * 4 * 2, 4096 * 16 * 4]
