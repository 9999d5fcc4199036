"""Step-based performance model of one engine instance (vLLM-style continuous batching).

One scheduler task per engine runs engine steps back to back while there is work. Each step decodes one
token (or 1 + accepted drafts under speculative decoding) for every running sequence and spends the rest
of the token budget (max_num_batched_tokens) on chunked prefill, exactly like vLLM V1's scheduler. The
step's duration comes from `step_seconds` (gateway/sim/perf.py, formulas written next to it), never from
a table of sleeps, so batching, long contexts, speculation and a second engine on the same device
interact the way they do on a GB10.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from gateway.sim.clock import SimClock
from gateway.sim.perf import COPY_ACCEPTANCE, Device, PerfSpec, StepLoad, step_seconds


@dataclass
class EngineStats:
    """Cumulative counters and live gauges an engine exposes on /metrics (flavor-neutral)."""

    running: int = 0
    waiting: int = 0
    kv_used_tokens: int = 0
    kv_capacity_tokens: int = 1
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    requests_finished_total: int = 0
    requests_cancelled_total: int = 0
    preemptions_total: int = 0
    spec_drafts_total: int = 0
    spec_draft_tokens_total: int = 0
    spec_accepted_tokens_total: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=list)
    steps_total: int = 0
    busy_seconds_total: float = 0.0


@dataclass(eq=False)
class _Sequence:
    """One request inside the engine. `target` is what prefill must cover: the prompt, plus the tokens
    already generated when a preempted sequence is recomputed (vLLM's recompute preemption)."""

    prompt: int
    max_tokens: int
    rng: random.Random
    copy_share: float = 0.0  # share of decode steps that copy a span of the context (speculation)
    rates: list[float] = field(default_factory=list)  # per-position acceptance of the other steps
    outbox: asyncio.Queue[int] = field(default_factory=asyncio.Queue)
    target: int = 0
    computed: int = 0
    generated: int = 0
    done: bool = False
    recomputed: int = 0  # generated tokens folded into `target` by a preemption (not double counted)

    @property
    def prefilled(self) -> bool:
        return self.computed >= self.target

    @property
    def kv_tokens(self) -> int:
        # While prefilling, KV holds the computed part; afterwards the prompt plus every token generated.
        return self.computed if not self.prefilled else self.target + self.generated - self.recomputed


@dataclass
class _Plan:
    decode: list[_Sequence]
    prefill: list[tuple[_Sequence, int]]  # (sequence, chunk tokens scheduled this step)


class EngineModel:
    """One simulated engine instance on a device.

    generate() yields, once per engine step that produced output for this request, the number of new
    tokens that step produced (1 normally; up to k+1 with speculative decoding). The first yield is the
    first token (its timing is the TTFT). The sum of yields is exactly max_tokens. Closing the iterator
    early (client went away) cancels the request: the engine frees its slot and KV and counts it in
    stats.requests_cancelled_total.
    """

    def __init__(self, perf: PerfSpec, device: Device, clock: SimClock) -> None:
        self.perf = perf
        self.device = device
        self.clock = clock
        self.slowdown = 1.0
        self.stats = EngineStats(kv_capacity_tokens=perf.kv_capacity_tokens)
        if perf.speculative is not None:
            self.stats.spec_accepted_per_pos = [0] * perf.speculative.k
        self._engine_id = id(self)
        self._waiting: deque[_Sequence] = deque()
        self._running: list[_Sequence] = []
        self._requests = itertools.count()
        self._task: asyncio.Task[None] | None = None
        self._last_step_end = 0.0
        # Cleared while wedged: the scheduler takes no step, so nothing is computed, emitted or
        # counted, and cancellations wait too (a real engine handles aborts in the loop that is stuck).
        self._unwedged = asyncio.Event()
        self._unwedged.set()
        self._aborts: list[_Sequence] = []

    # ----------------------------------------------------------------------------------------- requests

    async def generate(
        self, prompt_tokens: int, max_tokens: int, repetition: float | None = None
    ) -> AsyncGenerator[int, None]:
        """`repetition`: the request's content (gateway/repetition.py), which sets how many speculative
        drafts are accepted; None keeps the configured acceptance."""
        if prompt_tokens < 1 or max_tokens < 1:
            raise ValueError("prompt_tokens and max_tokens must be positive")
        if prompt_tokens + max_tokens > self.perf.kv_capacity_tokens:
            raise ValueError(
                f"request needs {prompt_tokens + max_tokens} KV tokens, capacity is "
                f"{self.perf.kv_capacity_tokens}"
            )
        # Seeded per request (engine seed, arrival number): the same run replays the same acceptances.
        rng = random.Random(self.perf.seed * 1_000_003 + next(self._requests))
        seq = _Sequence(prompt=prompt_tokens, max_tokens=max_tokens, rng=rng, target=prompt_tokens)
        if self.perf.speculative is not None:
            seq.copy_share, seq.rates = self.perf.speculative.acceptance_at(repetition)
        self._waiting.append(seq)
        self._publish_gauges()
        self._ensure_running()
        emitted = 0
        try:
            while emitted < max_tokens:
                n = await seq.outbox.get()
                emitted += n
                yield n
        finally:
            if emitted >= max_tokens:
                self.stats.requests_finished_total += 1
            else:
                self._cancel(seq)

    async def aclose(self) -> None:
        """Stop the scheduler task (pending requests stay queued; a later generate() restarts it)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                if not task.cancelled():
                    raise
        self.device.set_busy(self._engine_id, False)

    @property
    def wedged(self) -> bool:
        return not self._unwedged.is_set()

    def wedge(self) -> None:
        """The engine's loop stops between two steps; its HTTP server still answers."""
        self._unwedged.clear()

    def unwedge(self) -> None:
        self._unwedged.set()

    def _cancel(self, seq: _Sequence) -> None:
        seq.done = True
        if self.wedged:
            self._aborts.append(seq)
            return
        self.stats.requests_cancelled_total += 1
        if seq in self._waiting:
            self._waiting.remove(seq)
        if seq in self._running:
            self._running.remove(seq)
        self._publish_gauges()

    # ---------------------------------------------------------------------------------------- scheduler

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="engine-model")

    async def _run(self) -> None:
        """Run steps while there is work; exit when idle so an idle engine holds no task."""
        self.device.set_busy(self._engine_id, True)
        self._last_step_end = self.clock.now()
        try:
            while self._waiting or self._running:
                await self._step()
        finally:
            self.device.set_busy(self._engine_id, False)
            if self._task is asyncio.current_task():
                self._task = None

    async def _step(self) -> None:
        if self.wedged:
            await self._unwedged.wait()
            self._last_step_end = self.clock.now()  # no catching up on the time it stood still
        aborts, self._aborts = self._aborts, []
        for seq in aborts:  # those that came while it was wedged
            self._cancel(seq)
        plan = self._plan()
        if not plan.decode and not plan.prefill:
            # Nothing schedulable (every waiting request blocked on KV with nothing running): cannot
            # happen for a request that fits alone, which generate() guarantees; yield to avoid a spin.
            await asyncio.sleep(0)
            return
        load = StepLoad(
            decode_seqs=len(plan.decode),
            decode_context=sum(s.kv_tokens for s in plan.decode),
            prefill_chunks=[(s.computed, n) for s, n in plan.prefill],
            new_requests=sum(1 for s, _ in plan.prefill if s.computed == 0),
        )
        duration = step_seconds(self.perf, self.device.spec, load)
        duration *= self.device.contention_factor(self._engine_id) * self.slowdown
        # Deadline scheduling: while busy, steps are laid end to end on the simulated timeline, so a late
        # wake-up (event-loop lag, timer granularity at high time scales) shortens the next sleep
        # instead of stretching the engine's clock.
        self._last_step_end += duration
        await self.clock.sleep(self._last_step_end - self.clock.now())
        self.stats.steps_total += 1
        self.stats.busy_seconds_total += duration
        self._apply(plan)

    def _plan(self) -> _Plan:
        perf = self.perf
        spec = perf.speculative
        per_decode = 1 + (spec.k if spec is not None else 0)
        decode = [s for s in self._running if s.prefilled]
        # KV must hold one more step for every decoding sequence (k+1 slots under speculation); when it
        # does not, preempt the newest running sequence, as vLLM does, until it fits.
        while decode and self._kv_used() + per_decode * len(decode) > perf.kv_capacity_tokens:
            victim = self._running[-1]
            self._preempt(victim)
            if victim in decode:
                decode.remove(victim)
        budget = perf.max_num_batched_tokens - per_decode * len(decode)
        free = perf.kv_capacity_tokens - self._kv_used() - per_decode * len(decode)
        prefill: list[tuple[_Sequence, int]] = []
        for seq in self._running:
            if not seq.prefilled and budget > 0 and free > 0:
                n = min(seq.target - seq.computed, budget, free)
                prefill.append((seq, n))
                budget -= n
                free -= n
        while self._waiting and budget > 0 and len(self._running) < perf.max_num_seqs:
            seq = self._waiting[0]
            n = min(seq.target, budget)
            if n > free:
                break  # not enough KV to start it: it waits (stats.waiting)
            self._waiting.popleft()
            self._running.append(seq)
            prefill.append((seq, n))
            budget -= n
            free -= n
        self._publish_gauges()
        return _Plan(decode=decode, prefill=prefill)

    def _apply(self, plan: _Plan) -> None:
        for seq in plan.decode:
            if not seq.done and seq in self._running:
                self._emit(seq, self._decode_tokens(seq))
        for seq, n in plan.prefill:
            if seq.done or seq not in self._running:
                continue
            seq.computed += n
            if seq.prefilled:
                # The step that completes the prompt (or a preempted sequence's recompute) samples a token.
                if seq.generated == 0:
                    self.stats.prompt_tokens_total += seq.prompt
                self._emit(seq, 1)
        self._publish_gauges()

    def _decode_tokens(self, seq: _Sequence) -> int:
        """Tokens one decode step gives `seq`: 1, or accepted draft prefix + 1 bonus under speculation.

        acceptance[i] is vLLM's per-position rate (drafts whose position i was accepted / drafts), so the
        probability of accepting position i given positions < i were accepted is a[i] / a[i-1].
        """
        spec = self.perf.speculative
        if spec is None:
            return 1
        accepted = 0
        if seq.copy_share > 0 and seq.rng.random() < seq.copy_share:
            # A step inside a span the context already holds: every position at the copy rate.
            while accepted < spec.k and seq.rng.random() < COPY_ACCEPTANCE:
                accepted += 1
        else:
            previous = 1.0
            for p in seq.rates[: spec.k]:
                conditional = p / previous if previous > 0 else 0.0
                if seq.rng.random() >= conditional:
                    break
                accepted += 1
                previous = p
        self.stats.spec_drafts_total += 1
        self.stats.spec_draft_tokens_total += spec.k
        self.stats.spec_accepted_tokens_total += accepted
        for i in range(accepted):
            self.stats.spec_accepted_per_pos[i] += 1
        return 1 + accepted

    def _emit(self, seq: _Sequence, n: int) -> None:
        n = min(n, seq.max_tokens - seq.generated)
        seq.generated += n
        self.stats.generation_tokens_total += n
        seq.outbox.put_nowait(n)
        if seq.generated >= seq.max_tokens:
            seq.done = True
            self._running.remove(seq)

    def _preempt(self, seq: _Sequence) -> None:
        """Recompute preemption: drop its KV, requeue it first; its prefill then covers prompt+output."""
        self._running.remove(seq)
        seq.recomputed = seq.generated
        seq.target = seq.prompt + seq.generated
        seq.computed = 0
        self._waiting.appendleft(seq)
        self.stats.preemptions_total += 1

    def _kv_used(self) -> int:
        return sum(s.kv_tokens for s in self._running)

    def _publish_gauges(self) -> None:
        self.stats.running = len(self._running)
        self.stats.waiting = len(self._waiting)
        self.stats.kv_used_tokens = self._kv_used()
