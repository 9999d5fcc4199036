"""One simulated engine: a performance model behind a flavor's HTTP surface, with a lifecycle.

Lifecycle (simulated seconds): the port is bound at start; the engine loads for `warmup_s` (vLLM and
SGLang do not listen meanwhile, llama.cpp listens and answers 503 "Loading model"; SGLang then listens
with /health 503 for the last part of its warm-up), then serves. Faults from the fleet file fire at their
fleet time; tests drive the same faults directly with crash(), hang(), wedge(), restart(), set_slowdown() and
set_error_rate().
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Literal

from aiohttp import web

from gateway.repetition import prompt_repetition
from gateway.sim.clock import SimClock
from gateway.sim.flavors import flavor_for
from gateway.sim.flavors.base import Flavor, RunSummary
from gateway.sim.flavors.observed import Observations
from gateway.sim.flavors.request import RequestPlan
from gateway.sim.fleet import EngineSpec
from gateway.sim.model import EngineModel, EngineStats
from gateway.sim.perf import Device
from gateway.sim.server import build_app

Phase = Literal["stopped", "loading", "warming", "ready", "hung", "crashed"]
log = logging.getLogger(__name__)

# How long a crash or stop waits for handlers to notice their connection is gone, real seconds.
_SHUTDOWN_TIMEOUT_S = 0.25


class SimEngine:
    def __init__(self, spec: EngineSpec, device: Device, clock: SimClock, host: str = "127.0.0.1") -> None:
        self.spec = spec
        self.device = device
        self.clock = clock
        self.host = host
        self.flavor: Flavor = flavor_for(spec.flavor)
        self.model = EngineModel(spec.perf, device, clock)
        self.observed = Observations()
        self.error_rate = spec.faults.error_rate
        self.stream_error_rate = spec.faults.stream_error_rate
        self.rng = random.Random(f"{spec.seed}:{spec.name}")
        self.phase: Phase = "stopped"
        self.port = spec.port
        self.started_unix = time.time()
        self._sock: socket.socket | None = None
        self._runner: web.AppRunner | None = None
        self._boot_task: asyncio.Task[None] | None = None
        self._fault_tasks: list[asyncio.Task[None]] = []
        self._transports: set[asyncio.Transport] = set()
        self._awake = asyncio.Event()  # cleared while hung: handlers and streams wait on it
        self._awake.set()
        self._ready = asyncio.Event()

    # --- EngineView -------------------------------------------------------------------------------
    @property
    def stats(self) -> EngineStats:
        return self.model.stats

    @property
    def busy(self) -> bool:
        return self.model.stats.running > 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # --- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        """Reserve the port (known from here on), then load in the background."""
        self._bind()
        self.phase = "loading"
        if self.flavor.listens_while_loading:
            await self._listen()
        self._boot_task = asyncio.create_task(self._boot(), name=f"boot-{self.spec.name}")
        if not self._fault_tasks:
            self._schedule_faults()

    async def stop(self) -> None:
        for task in [*self._fault_tasks, *([self._boot_task] if self._boot_task else [])]:
            task.cancel()
        await asyncio.gather(
            *self._fault_tasks, *([self._boot_task] if self._boot_task else []), return_exceptions=True
        )
        self._fault_tasks.clear()
        await self._go_down("stopped")

    async def crash(self) -> None:
        """The process dies: in-flight connections drop, new ones are refused."""
        if self._boot_task is not None:
            self._boot_task.cancel()
        await self._go_down("crashed")
        log.info("engine %s crashed", self.spec.name)

    def hang(self) -> None:
        """The engine stops answering: connections are accepted, nothing is ever sent."""
        self.phase = "hung"
        self._awake.clear()
        log.info("engine %s hung", self.spec.name)

    async def restart(self) -> None:
        """A fresh process on the same port: counters reset, warm-up again."""
        if self._boot_task is not None:
            self._boot_task.cancel()
        await self._go_down("stopped")
        self.model = EngineModel(self.spec.perf, self.device, self.clock)
        self.observed = Observations()
        self.started_unix = time.time()
        await self.start()

    def wedge(self) -> None:
        """The engine's loop stops: its HTTP server, /health and /metrics answer, no token comes."""
        self.model.wedge()
        log.info("engine %s wedged", self.spec.name)

    def unwedge(self) -> None:
        self.model.unwedge()
        log.info("engine %s runs again", self.spec.name)

    def set_slowdown(self, factor: float) -> None:
        self.model.slowdown = factor

    def set_error_rate(self, rate: float, stream_rate: float | None = None) -> None:
        self.error_rate = rate
        if stream_rate is not None:
            self.stream_error_rate = stream_rate

    async def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Wait (real seconds) until the engine serves."""
        await asyncio.wait_for(self._ready.wait(), timeout_s)

    async def wait_awake(self) -> None:
        await self._awake.wait()

    # --- request lifecycle (used by the server) ---------------------------------------------------
    def track(self, transport: asyncio.Transport | None) -> None:
        if transport is not None:
            self._transports.add(transport)

    def untrack(self, transport: asyncio.Transport | None) -> None:
        if transport is not None:
            self._transports.discard(transport)

    def should_fail(self) -> bool:
        return self.error_rate > 0 and self.rng.random() < self.error_rate

    def should_fail_stream(self) -> bool:
        return self.stream_error_rate > 0 and self.rng.random() < self.stream_error_rate

    def run(self, plan: RequestPlan) -> RequestRun:
        return RequestRun(self, plan)

    # --- internals --------------------------------------------------------------------------------
    def _bind(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self._sock = sock

    async def _boot(self) -> None:
        self._ready.clear()
        self._awake.set()
        warm_s = self.spec.warmup_s * self.flavor.warming_fraction
        await self.clock.sleep(self.spec.warmup_s - warm_s)
        if not self.flavor.listens_while_loading:
            await self._listen()
        if warm_s > 0:
            self.phase = "warming"
            await self.clock.sleep(warm_s)
        self.phase = "ready"
        self._ready.set()
        log.info("engine %s (%s) ready at %s", self.spec.name, self.spec.flavor, self.url)

    async def _listen(self) -> None:
        assert self._sock is not None
        runner = web.AppRunner(
            build_app(self), handler_cancellation=True, access_log=None, shutdown_timeout=_SHUTDOWN_TIMEOUT_S
        )
        await runner.setup()
        site = web.SockSite(runner, self._sock)
        await site.start()
        self._runner = runner

    async def _go_down(self, phase: Phase) -> None:
        self.phase = phase
        self._ready.clear()
        self._awake.set()  # release hung handlers so they see their connection go
        for transport in list(self._transports):
            transport.abort()
        self._transports.clear()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        elif self._sock is not None:
            self._sock.close()
        self._sock = None
        await self.model.aclose()

    def _schedule_faults(self) -> None:
        faults = self.spec.faults
        if faults.crash_at_s is not None:
            self._at(faults.crash_at_s, self.crash)
        if faults.hang_at_s is not None:
            self._at(faults.hang_at_s, self._hang_async)
        if faults.slowdown_at_s is not None:
            factor = faults.slowdown_factor
            self._at(faults.slowdown_at_s, lambda: self._slowdown_async(factor))

    def _at(self, sim_time: float, action: Callable[[], Awaitable[None]]) -> None:
        async def fire() -> None:
            await self.clock.sleep(sim_time - self.clock.now())
            await action()

        self._fault_tasks.append(asyncio.create_task(fire(), name=f"fault-{self.spec.name}"))

    async def _hang_async(self) -> None:
        self.hang()

    async def _slowdown_async(self, factor: float) -> None:
        self.set_slowdown(factor)


class RequestRun:
    """One request inside the engine: drives the model's generator and records what happened in
    simulated time (TTFT, per-step ITL, e2e, finish reason, speculative drafts of this request)."""

    def __init__(self, engine: SimEngine, plan: RequestPlan) -> None:
        self._engine = engine
        self._plan = plan
        self._start = engine.clock.now()
        self._first: float | None = None
        self._last = self._start
        self.tokens = 0
        self.steps = 0
        self._accepted = 0
        self._drafting_steps = 0
        engine.observed.requests_total += 1

    async def steps_of(self) -> AsyncGenerator[int, None]:
        """Tokens per engine step; closing early cancels the request in the model at once."""
        engine = self._engine
        request = self._plan.request
        # The same figure the gateway's features compute, from the same JSON values the client sent.
        repetition = prompt_repetition(request.messages or None, request.prompt or None)
        gen = engine.model.generate(self._plan.prompt.tokens, self._plan.completion_tokens, repetition)
        async with contextlib.aclosing(gen):
            async for produced in gen:
                await engine.wait_awake()
                self._record(produced)
                yield produced

    async def to_end(self) -> RunSummary:
        """Every step, for a whole (non-stream) answer; the summary of the finished run. A request
        cancelled meanwhile (its client gone) is recorded as aborted."""
        try:
            async with contextlib.aclosing(self.steps_of()) as steps:
                async for _ in steps:
                    pass
        except asyncio.CancelledError:
            self.finish("abort")
            raise
        return self.finish(self._plan.finish_reason)

    def _record(self, produced: int) -> None:
        now = self._engine.clock.now()
        obs = self._engine.observed
        if self._first is None:
            self._first = now
            obs.ttft.observe(now - self._start)
        else:
            obs.itl.observe(now - self._last)
            if self._engine.spec.perf.speculative is not None:
                self._drafting_steps += 1
                self._accepted += produced - 1
        self._last = now
        self.tokens += produced
        self.steps += 1

    def finish(self, reason: str) -> RunSummary:
        """Record the outcome ("stop", "length", "abort", "error") and summarise the run."""
        obs = self._engine.observed
        obs.finished[reason] += 1
        if reason == "error":
            obs.errors_total += 1
        now = self._engine.clock.now()
        first = self._first if self._first is not None else now
        if reason in ("stop", "length"):
            obs.e2e.observe(now - self._start)
        obs.prompt_seconds_total += first - self._start
        obs.predicted_seconds_total += now - first
        obs.decode_steps_total += self.steps
        obs.max_tokens_in_request = max(obs.max_tokens_in_request, self._plan.prompt.tokens + self.tokens)
        speculative = self._engine.spec.perf.speculative
        k = speculative.k if speculative is not None else 0
        return RunSummary(
            prompt_tokens=self._plan.prompt.tokens,
            completion_tokens=self.tokens,
            prompt_s=first - self._start,
            predicted_s=now - first,
            draft_n=self._drafting_steps * k,
            draft_accepted=self._accepted,
        )
