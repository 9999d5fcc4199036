"""Which resident engines to stop so another fits its device's memory budget: pure, on plain data.

The rules, in order: a pinned engine is never chosen, nor one still loading (its start would be wasted
and its clients would wait a second cold start), nor one serving for less than the minimum residency
(no flapping), counted from when it was ready and the clients told to come back for it were due,
whichever is later; an idle engine goes before one with requests in flight (which is drained first, never
cut off); among the rest, the one whose loss costs least goes first, cost being its recent demand
(requests per minute) times its measured cold start (seconds): what bringing it back would make its
clients wait in all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Resident:
    """One engine holding memory on the device."""

    name: str
    memory_gib: float
    inflight: int
    pinned: bool
    # Since it was ready and the clients told to come back for it were due, whichever is later (negative
    # before then): an engine evicted earlier breaks the Retry-After its clients were given.
    serving_s: float
    demand_per_min: float
    cold_start_s: float
    idle_s: float = 0.0  # since its last request
    loading: bool = False  # started, not ready yet

    @property
    def cost(self) -> float:
        return self.demand_per_min * self.cold_start_s


@dataclass(frozen=True, slots=True)
class Eviction:
    """The engines to stop, cheapest first, or why none can make room."""

    evict: tuple[str, ...] = ()
    refusal: str | None = None


class Planner(Protocol):
    """How the manager chooses whom to evict: `plan` below, or another policy with the same inputs."""

    def __call__(
        self,
        residents: Sequence[Resident],
        need_gib: float,
        budget_gib: float,
        min_residency_s: float,
        spare_busy: bool = False,
    ) -> Eviction: ...


def plan(
    residents: Sequence[Resident],
    need_gib: float,
    budget_gib: float,
    min_residency_s: float,
    spare_busy: bool = False,
) -> Eviction:
    """Stop the fewest, cheapest engines so `need_gib` more fits in `budget_gib`. With `spare_busy`, an
    engine with requests in flight is not chosen at all (the start waits for it to go idle)."""
    used = sum(r.memory_gib for r in residents)
    short = used + need_gib - budget_gib
    if short <= 1e-9:
        return Eviction()
    movable = [
        r
        for r in residents
        if not r.pinned
        and not r.loading
        and r.serving_s >= min_residency_s
        and not (spare_busy and r.inflight > 0)
    ]
    # Idle ones first, then by cost; a tie goes to the larger footprint (fewer stops).
    movable.sort(key=lambda r: (r.inflight > 0, r.cost, -r.memory_gib))
    chosen: list[str] = []
    for resident in movable:
        if short <= 1e-9:
            break
        chosen.append(resident.name)
        short -= resident.memory_gib
    if short > 1e-9:
        held = [r.name for r in residents if r.name not in chosen]
        why = f"{need_gib:g} GiB do not fit in {budget_gib:g} GiB beside {', '.join(held) or 'nothing'}"
        busy = ", busy" if spare_busy else ""
        return Eviction(refusal=f"{why} (pinned, loading{busy}, or ready for less than {min_residency_s:g}s)")
    return Eviction(tuple(chosen))


def eviction_wait_s(victim: Resident, newcomer_cold_start_s: float, min_residency_s: float) -> float:
    """The waiting evicting `victim` brings its clients, in client-seconds: once stopped, it cannot be
    back before the newcomer has started and stayed its minimum residency and it has started again, a
    span in which its demand keeps arriving and each request waits about half of it."""
    span = newcomer_cold_start_s + min_residency_s + victim.cold_start_s
    return victim.demand_per_min / 60.0 * span * span / 2.0


def worth_swapping(
    waiting_cost_s: float, eviction_cost_s: float, oldest_wait_s: float, max_wait_s: float
) -> bool:
    """Whether the requests queued for a stopped model should evict a resident now, or gather longer.

    `waiting_cost_s` is what the queued requests wait in all if started now (what they waited so far
    plus the cold start, each); `eviction_cost_s` what the victims' clients would wait
    (`eviction_wait_s`). Queued requests are batched until the first outweighs the second, and never
    longer than `max_wait_s` for the oldest of them."""
    return oldest_wait_s >= max_wait_s or waiting_cost_s >= eviction_cost_s
