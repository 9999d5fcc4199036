"""Admission: slots per backend, the bounded FIFO queue per pool, deadlines and cancellation."""

from __future__ import annotations

import asyncio

from gateway.backends.inflight import InFlight
from gateway.proxy.admission import Admission, AdmissionConfig, Refused, Slot

BOUND = 5.0  # no test waits longer than this on anything


def ready_admission(limits: dict[str, int | None], max_queue: int = 8, timeout: float = 2.0) -> Admission:
    config = AdmissionConfig(max_queue=max_queue, queue_timeout_seconds=timeout, retry_after_seconds=3)
    admission = Admission(config)
    admission.configure(limits)
    for name in limits:
        admission.set_ready(name, True)
    return admission


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def slot_of(result: Slot | Refused | None) -> Slot:
    assert isinstance(result, Slot), result
    return result


async def test_slots_count_in_flight_from_the_moment_they_are_taken() -> None:
    admission = ready_admission({"a": 2})
    first = slot_of(admission.try_acquire(["a"]))
    assert admission.inflight("a") == 1
    second = slot_of(await admission.acquire("pool", ["a"]))
    assert admission.inflight("a") == 2
    assert admission.try_acquire(["a"]) is None
    first.release()
    first.release()  # a second release is a no-op
    assert admission.inflight("a") == 1
    async with second:
        pass
    assert admission.inflight("a") == 0


async def test_the_first_ranked_backend_with_room_is_taken() -> None:
    admission = ready_admission({"a": 1, "b": 1})
    assert slot_of(admission.try_acquire(["a", "b"])).backend == "a"
    assert slot_of(admission.try_acquire(["a", "b"])).backend == "b"
    assert admission.backends()["a"].inflight == 1


async def test_a_backend_that_is_not_ready_gives_no_slot() -> None:
    admission = ready_admission({"a": 4})
    admission.set_ready("a", False)
    assert admission.try_acquire(["a"]) is None


async def test_a_full_queue_refuses_at_once_with_429_and_retry_after() -> None:
    admission = ready_admission({"a": 1}, max_queue=2)
    holder = slot_of(admission.try_acquire(["a"]))
    waiters = [asyncio.create_task(admission.acquire("pool", ["a"])) for _ in range(2)]
    await settle()
    assert admission.queues()["pool"].waiting == 2
    refused = await asyncio.wait_for(admission.acquire("pool", ["a"]), 0.5)
    assert isinstance(refused, Refused)
    assert (refused.status, refused.code, refused.retry_after) == (429, "queue_full", 3)
    assert "full" in refused.message
    holder.release()
    for task in waiters:
        task.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)


async def test_a_passed_deadline_gives_503_and_leaves_the_queue() -> None:
    admission = ready_admission({"a": 1})
    slot_of(admission.try_acquire(["a"]))
    started = asyncio.get_running_loop().time()
    result = await asyncio.wait_for(admission.acquire("pool", ["a"], timeout=0.05), BOUND)
    assert isinstance(result, Refused) and result.status == 503 and result.code == "queue_timeout"
    assert result.retry_after == 3
    assert asyncio.get_running_loop().time() - started < 1.0
    assert admission.queues()["pool"].waiting == 0
    assert admission.inflight("a") == 1


async def test_waiters_are_served_in_arrival_order_one_per_freed_slot() -> None:
    admission = ready_admission({"a": 1})
    holder = slot_of(admission.try_acquire(["a"]))
    tasks = []
    for _ in range(3):
        tasks.append(asyncio.create_task(admission.acquire("pool", ["a"])))
        await settle()
    holder.release()
    await settle()
    assert [t.done() for t in tasks] == [True, False, False]
    assert admission.inflight("a") == 1, "the freed slot is handed over, never dropped"
    slot_of(tasks[0].result()).release()
    await settle()
    assert [t.done() for t in tasks] == [True, True, False]
    slot_of(tasks[1].result()).release()
    slot_of(await asyncio.wait_for(tasks[2], BOUND)).release()
    assert admission.inflight("a") == 0


async def test_a_freed_slot_goes_to_the_oldest_waiter_that_can_use_it() -> None:
    admission = ready_admission({"a": 1, "b": 1})
    on_a = slot_of(admission.try_acquire(["a"]))
    slot_of(admission.try_acquire(["b"]))
    only_b = asyncio.create_task(admission.acquire("pool", ["b"]))
    await settle()
    a_or_b = asyncio.create_task(admission.acquire("other-pool", ["a", "b"]))
    await settle()
    on_a.release()
    await settle()
    assert not only_b.done()
    assert slot_of(a_or_b.result()).backend == "a"
    only_b.cancel()
    await asyncio.gather(only_b, return_exceptions=True)


async def test_a_cancelled_waiter_leaves_the_queue_and_frees_nothing() -> None:
    admission = ready_admission({"a": 1})
    holder = slot_of(admission.try_acquire(["a"]))
    gone = asyncio.create_task(admission.acquire("pool", ["a"]))
    await settle()
    gone.cancel()
    await asyncio.gather(gone, return_exceptions=True)
    assert gone.cancelled()
    assert admission.queues()["pool"].waiting == 0
    assert admission.inflight("a") == 1
    holder.release()
    assert admission.inflight("a") == 0
    assert slot_of(admission.try_acquire(["a"])).backend == "a"
    assert admission.try_acquire(["a"]) is None, "the limit still holds after a cancellation"


async def test_a_slot_granted_as_the_waiter_is_cancelled_passes_to_the_next_waiter() -> None:
    admission = ready_admission({"a": 1})
    holder = slot_of(admission.try_acquire(["a"]))
    unlucky = asyncio.create_task(admission.acquire("pool", ["a"]))
    await settle()
    next_in_line = asyncio.create_task(admission.acquire("pool", ["a"]))
    await settle()
    holder.release()  # hands the slot to `unlucky`'s future...
    unlucky.cancel()  # ...which is cancelled before it can resume
    await asyncio.gather(unlucky, return_exceptions=True)
    slot = slot_of(await asyncio.wait_for(next_in_line, BOUND))
    assert admission.inflight("a") == 1
    slot.release()
    assert admission.inflight("a") == 0


async def test_waiters_for_a_starting_backend_are_served_when_it_becomes_ready() -> None:
    admission = ready_admission({"a": 2})
    admission.set_ready("a", False)
    waiter = asyncio.create_task(admission.acquire("pool", ["a"]))
    await settle()
    assert not waiter.done()
    admission.set_ready("a", True)
    assert slot_of(await asyncio.wait_for(waiter, BOUND)).backend == "a"
    assert admission.inflight("a") == 1


async def test_raising_a_limit_wakes_waiters_and_removed_backends_are_forgotten_once_idle() -> None:
    admission = ready_admission({"a": 1, "b": None})
    holder = slot_of(admission.try_acquire(["a"]))
    waiter = asyncio.create_task(admission.acquire("pool", ["a"]))
    await settle()
    admission.configure({"a": 2})
    slot_of(await asyncio.wait_for(waiter, BOUND))
    assert "b" not in admission.backends()
    admission.configure({})
    assert admission.try_acquire(["a"]) is None, "a removed backend takes no new request"
    holder.release()
    assert "a" in admission.backends()
    slot_of(waiter.result()).release()
    assert admission.backends() == {}


async def test_an_unlimited_backend_never_queues() -> None:
    admission = ready_admission({"a": None})
    slots = [slot_of(await admission.acquire("pool", ["a"])) for _ in range(100)]
    assert admission.inflight("a") == 100
    for slot in slots:
        slot.release()
    assert admission.inflight("a") == 0


async def test_a_backend_shared_by_two_pools_serves_the_oldest_waiter_of_either() -> None:
    admission = ready_admission({"shared": 1})
    holder = slot_of(admission.try_acquire(["shared"]))
    older = asyncio.create_task(admission.acquire("pool-1", ["shared"]))
    await settle()
    newer = asyncio.create_task(admission.acquire("pool-2", ["shared"]))
    await settle()
    holder.release()
    await settle()
    assert older.done() and not newer.done()
    slot_of(older.result()).release()
    slot_of(await asyncio.wait_for(newer, BOUND)).release()
    assert admission.inflight("shared") == 0


async def test_slots_are_counts_of_the_shared_in_flight_count_and_a_handover_never_changes_it() -> None:
    counts = InFlight()
    changes: list[int] = []  # the count just before each change
    counts.watchers.append(lambda: changes.append(counts["a"]))
    admission = Admission(AdmissionConfig(max_queue=8, queue_timeout_seconds=2.0), counts)
    admission.configure({"a": 1})
    admission.set_ready("a", True)
    holder = slot_of(admission.try_acquire(["a"]))
    assert counts["a"] == 1 and changes == [0]
    waiter = asyncio.create_task(admission.acquire("pool", ["a"]))
    await settle()
    holder.release()
    handed = slot_of(await asyncio.wait_for(waiter, BOUND))
    assert counts["a"] == 1 and changes == [0], "the slot went straight to the waiter"
    handed.release()
    assert counts["a"] == 0 and changes == [0, 1]
