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
