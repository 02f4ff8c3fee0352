"""Two device slots on one GPU (``--gpus 0,0``): a slot's untimed GPU work (reference, correctness
trials, comparisons) holds the device's host lock shared, so the other slot's timing window, which
takes it exclusively, never overlaps it; and the slots do not deadlock on the run's timing lock.

Before this, only timing windows took the lock: one slot's correctness trials ran on the GPU while the
other slot timed. Simulated with two evaluators in two threads (each holds its own lock handle, so
the flock locks conflict as between processes)."""

from __future__ import annotations

import threading
import time
import uuid

from kernelbench_harness.execution.device import DeviceEvaluator


def _overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_a_timing_window_never_overlaps_another_slots_untimed_work(tmp_path):
    key = f"test-{uuid.uuid4().hex}"
    run_lock = threading.Lock()  # the run's timing lock, shared by its slots
    evs = [DeviceEvaluator("cpu", scratch_dir=tmp_path / f"s{i}", sandbox=False, timing_lock=run_lock)
           for i in range(2)]
    for ev in evs:
        ev.host_lock_key = key
    spans: dict[str, list[list[float]]] = {"A-work": [], "A-time": [], "B-work": [], "B-time": []}
    errors: list[BaseException] = []

    def work(name: str, secs: float) -> None:
        t0 = time.time()
        time.sleep(secs)
        spans[name].append([t0, time.time()])

    def slot(ev: DeviceEvaluator, me: str, start_s: float) -> None:
        try:
            time.sleep(start_s)
            for _ in range(2):  # two candidates: work, a window, more work
                with ev._gpu_work():
                    work(f"{me}-work", 0.4)
                    with ev.timing_window("candidate"):
                        work(f"{me}-time", 0.2)
                    work(f"{me}-work", 0.3)
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    ts = [threading.Thread(target=slot, args=(evs[0], "A", 0.0)), threading.Thread(target=slot, args=(evs[1], "B", 0.1))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in ts), "the two slots deadlocked"
    assert not errors, errors
    assert len(spans["A-time"]) == 2 and len(spans["B-time"]) == 2
    for mine, other in (("A", "B"), ("B", "A")):
        for w in spans[f"{mine}-time"]:
            for o in spans[f"{other}-work"] + spans[f"{other}-time"]:
                assert not _overlap(w, o), (mine, w, other, o)
    # untimed work of the two slots may overlap (nothing is timed then): the hold is shared
    assert any(_overlap(a, b) for a in spans["A-work"] for b in spans["B-work"])
    for ev in evs:
        ev.close()


def test_without_a_host_lock_key_the_hold_does_nothing(tmp_path):
    ev = DeviceEvaluator("cpu", scratch_dir=tmp_path / "s", sandbox=False)
    assert ev.host_lock_key is None
    with ev._gpu_work():
        assert ev._gpu_share is None
        with ev.timing_window("candidate") as w:
            assert w["what"] == "candidate"
    ev.close()
