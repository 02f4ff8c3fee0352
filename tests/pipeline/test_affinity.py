"""Slots are handed out one job at a time, preferring the slot that last served the same problem."""

from __future__ import annotations

import asyncio

from kernelbench_harness.executors.base import AffinityQueue


def test_prefers_the_free_slot_that_holds_the_problem():
    async def go() -> list[int]:
        q = AffinityQueue(3)
        got = []
        for key in ("a", "b", "c"):
            i = await q.acquire(key)
            q.release(i, key)
            got.append(i)
        # every slot is free again; "b" goes back to the slot that served "b"
        j = await q.acquire("b")
        got.append(j)
        return got

    got = asyncio.run(go())
    assert got[3] == got[1]


def test_a_busy_slot_is_never_handed_out_twice():
    async def go() -> tuple[int, int, bool]:
        q = AffinityQueue(2)
        a = await q.acquire("x")
        b = await q.acquire("x")
        waiter = asyncio.ensure_future(q.acquire("x"))
        await asyncio.sleep(0.01)
        pending = not waiter.done()
        q.release(a, "x")
        c = await waiter
        return a, b, pending and c == a

    a, b, ok = asyncio.run(go())
    assert a != b and ok


def _flush() -> "asyncio.Future[None]":
    return asyncio.sleep(0.01)


def test_large_jobs_run_one_per_group_and_small_ones_go_on_beside_them():
    async def go() -> None:
        q = AffinityQueue(4)
        big1 = await q.acquire("L1", large=True)
        big2 = asyncio.ensure_future(q.acquire("L2", large=True))
        small = [asyncio.ensure_future(q.acquire(f"s{i}")) for i in range(3)]
        await _flush()
        # the second large job waits without a slot while the first runs; three small ones take the rest
        assert not big2.done() and all(t.done() for t in small)
        assert q.large_running() == 1
        assert len({big1, *(t.result() for t in small)}) == 4
        q.release(small[0].result(), "s0")
        await _flush()
        assert not big2.done()  # a free slot, but a large job still runs on this GPU
        later = asyncio.ensure_future(q.acquire("s9"))
        await _flush()
        assert later.done()  # the small one behind it takes that slot
        q.release(big1, "L1", large=True)
        await _flush()
        assert big2.done() and big2.result() == big1 and q.large_running() == 1

    asyncio.run(go())


def test_a_waiting_large_job_goes_ahead_of_small_ones_that_came_first():
    async def go() -> None:
        q = AffinityQueue(2)
        a = await q.acquire("a")
        b = await q.acquire("b")
        small = asyncio.ensure_future(q.acquire("c"))
        await _flush()
        big = asyncio.ensure_future(q.acquire("L", large=True))
        await _flush()
        q.release(a, "a")
        await _flush()
        assert big.done() and big.result() == a and not small.done()
        q.release(b, "b")
        await _flush()
        assert small.done() and small.result() == b

    asyncio.run(go())


def test_large_jobs_on_different_gpus_run_together():
    async def go() -> None:
        q = AffinityQueue(4, groups=["cuda:0", "cuda:0", "cuda:1", "cuda:1"])
        x = await q.acquire("L1", large=True)
        y = await q.acquire("L2", large=True)
        third = asyncio.ensure_future(q.acquire("L3", large=True))
        await _flush()
        assert q.groups[x] != q.groups[y] and not third.done()
        assert q.large_running("cuda:0") == 1 and q.large_running("cuda:1") == 1
        q.release(y, "L2", large=True)
        await _flush()
        assert third.done() and q.groups[third.result()] == q.groups[y]

    asyncio.run(go())


def test_a_cancelled_waiter_takes_no_slot():
    async def go() -> None:
        q = AffinityQueue(1)
        a = await q.acquire("a")
        gone = asyncio.ensure_future(q.acquire("b", large=True))
        nxt = asyncio.ensure_future(q.acquire("c"))
        await _flush()
        gone.cancel()
        await _flush()
        q.release(a, "a")
        await _flush()
        assert nxt.done() and nxt.result() == a and q.large_running() == 0
        # handed a slot just as it was cancelled: the slot comes back
        q.release(nxt.result(), "c")
        held = await q.acquire("d")
        late = asyncio.ensure_future(q.acquire("e", large=True))
        await _flush()
        q.release(held, "d")  # hands the slot to `late`, whose task is cancelled before it runs again
        late.cancel()
        await _flush()
        assert q.large_running() == 0
        again = await asyncio.wait_for(q.acquire("f"), 1.0)
        assert again == held

    asyncio.run(go())


def test_a_waiter_cancelled_just_before_a_release_is_skipped():
    async def go() -> None:
        q = AffinityQueue(1)
        a = await q.acquire("a")
        gone = asyncio.ensure_future(q.acquire("b"))
        nxt = asyncio.ensure_future(q.acquire("c"))
        await _flush()
        gone.cancel()  # its future is cancelled now; the task has not run its except clause yet
        q.release(a, "a")  # must skip it, not set a result on a cancelled future
        await _flush()
        assert nxt.done() and nxt.result() == a

    asyncio.run(go())
