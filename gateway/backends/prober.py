"""Background readiness probing, one task per backend.

Status rules (see backends/flavors.py for what each flavor's answers mean):
- a READY answer -> ready; capabilities are discovered again on every transition to ready;
- LOADING (llama.cpp 503 "Loading model", SGLang 503 before its first ready) -> starting, until the
  startup grace has run out since the backend stopped being ready, then dead;
- no answer (connection refused, timeout) -> starting while it has never been ready and the grace runs,
  dead otherwise (an engine that was serving and stops answering has failed);
- FAILING (a 5xx after ready, a 404 on the probe path) -> dead;
- connections refused (or a host name that does not resolve) for longer than the backend's warm-up bound
  (`warmup_bound`: learned, configured or its flavor's, backends/warmup.py) -> unreachable: nothing
  listens at its URL (backends/reachability.py), a WARNING names the host and port, and requests are no
  longer held for it. Before that, the detail says what the probes meet, so a wrong URL shows at once.
The startup grace counts from when the prober first saw the backend not ready (its creation for one that
never was), not from its last status change: a status change alone does not restart it.
Passive health: a probe that times out proves nothing on a loaded host. A ready backend stays ready
through probe timeouts while it answered a request within `passive_window_s`, and is called dead only
after `timeouts_to_dead` timeouts in a row; a refused connection is still proof at once.
Probes never generate tokens on vLLM and llama.cpp (/health is free there). SGLang's /health runs a
1-token generation, so the ready-state interval is kept long.
Every probe is one GET through the injected `fetch` (gateway/backends/fetch.py), bounded by
`ProbeConfig.timeout_s`; the app builds it from the upstream transport's control-plane GET, which has a
small connection pool of its own, so probes never queue behind client traffic.
Each probe's answer, or its timeout, is also reported to the `listener` (backends/control_plane.py: the
hang watch), which weighs a silent control plane against the requests in flight.
Each backend's loop is a `BackgroundTask` (gateway/tasks.py): a probe that fails in an unexpected way (a
transport or flavor error, not an answer) is logged once per distinct error and counts as a probe nobody
answered, so the backend's status follows (a serving backend is dead, not frozen at ready), and the loop
carries on: the first probe answered again brings the backend back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import orjson

from gateway.backends.control_plane import ControlPlaneListener
from gateway.backends.fetch import Fetch
from gateway.backends.flavors import FLAVORS, Capabilities, Verdict
from gateway.backends.reachability import host_port, nothing_listens
from gateway.backends.registry import BackendState, Registry, Status
from gateway.settings import ProbeConfig
from gateway.tasks import BackgroundTask

log = logging.getLogger("gateway.prober")


class Prober:
    def __init__(
        self,
        registry: Registry,
        config: ProbeConfig,
        fetch: Fetch,
        listener: ControlPlaneListener | None = None,
        warmup_bound: Callable[[str], float] | None = None,
    ) -> None:
        self.registry = registry
        self.config = config
        self._fetch = fetch
        self.listener = listener  # told of every probe answered or timed out
        # Seconds a backend may refuse connections while it loads (Warmups.expected, from app.py).
        self.warmup_bound = warmup_bound or (lambda name: config.startup_grace_s)
        # Whether the gateway runs the backend's engine itself (engines on demand; set by app.py): nothing
        # listening there is that engine stopped or not yet up, which its phase says, never a wrong URL, so
        # it is not called unreachable (a request starts it and waits instead of being refused).
        self.managed: Callable[[str], bool] = lambda name: False
        self._tasks: list[BackgroundTask] = []
        self._timeouts: dict[str, int] = {}  # probe timeouts in a row per backend
        self._refused_since: dict[str, float] = {}  # first of the refused probes in a row, per backend
        self._unready_since: dict[str, float] = {}  # when the prober first saw it not ready, per backend

    async def start(self) -> None:
        if self._tasks:
            return
        self._tasks = [
            BackgroundTask(
                partial(self._round, name),
                f"prober:{name}",
                on_error=partial(self._probe_failed, name),
                logger=log,
            )
            for name in self.registry.backends
        ]
        for task in self._tasks:
            task.start()

    async def stop(self) -> None:
        # Each stop cancels again until its task is done: a cancel that lands as a probe's own timeout
        # fires can be turned into that TimeoutError by the HTTP client.
        tasks, self._tasks = self._tasks, []
        await asyncio.gather(*(task.stop() for task in tasks))

    def timeouts_in_a_row(self, name: str) -> int:
        """Probes of `name` that timed out since its last answered (or refused) probe."""
        return self._timeouts.get(name, 0)

    async def _round(self, name: str) -> float:
        await self.probe_once(name)
        return self._pause(name)

    def _pause(self, name: str) -> float:
        ready = self.registry.backends[name].status is Status.READY
        return self.config.interval_s if ready else self.config.starting_interval_s

    def _probe_failed(self, name: str, exc: Exception) -> float:
        """A probe that raised instead of ending in a verdict (BackgroundTask has logged the error): no
        usable answer came, so it is judged like one nobody answered, never left at its last status."""
        state = self.registry.backends[name]
        new, detail = self._unreachable(state), f"probe failed: {type(exc).__name__}"
        if self.registry.set_status(name, new, detail):
            log.info("backend %s is %s (%s)", name, new, detail)
        return self._pause(name)

    async def probe_once(self, name: str) -> Status:
        state = self.registry.backends[name]
        flavor = FLAVORS[state.config.flavor]
        in_a_row = self._timeouts.pop(name, 0)
        try:
            status, body = await self._get(state, flavor.health_path)
        except TimeoutError:
            self._refused_since.pop(name, None)  # a connection was accepted, or is under way
            self._timeouts[name] = in_a_row + 1
            new, detail = self._timed_out(state, in_a_row + 1), "probe timed out"
            if self.listener is not None:
                self.listener.control_unanswered(name, self.config.timeout_s)
        except OSError as exc:
            new, detail = self._no_answer(state, exc)
        else:
            self._refused_since.pop(name, None)
            if self.listener is not None:
                self.listener.control_answered(name)
            verdict = flavor.judge(status, body, state.ever_ready)
            new, detail = self._judged(state, verdict), f"{flavor.health_path} -> {status}"
        if new is Status.READY:
            self._unready_since.pop(name, None)
            if state.status is not Status.READY:
                await self._discover(state)
        if self.registry.set_status(name, new, detail):
            level = logging.WARNING if new is Status.UNREACHABLE else logging.INFO
            log.log(level, "backend %s is %s (%s)", name, new, detail)
        return new

    def _no_answer(self, state: BackendState, exc: OSError) -> tuple[Status, str]:
        """A probe nobody answered. Refusals past the warm-up bound: unreachable; before: as any probe
        without an answer, the detail naming the address so a wrong URL shows from the first probe."""
        why = nothing_listens(exc)
        name, now = state.config.name, self.registry.clock()
        if why is None:
            self._refused_since.pop(name, None)  # reset, not refused: something is there
            return self._unreachable(state), f"no answer: {type(exc).__name__}"
        first = self._refused_since.setdefault(name, now)
        if state.status is Status.STARTING and state.since > first:
            # A (re)start began since (an engine container started, Registry.warming_from_now): its
            # warm-up counts from there, not from the refusals of the engine that was not running.
            first = self._refused_since[name] = state.since
        refused_for = now - first
        where, bound = host_port(state.config.url), self.warmup_bound(name)
        if refused_for > bound and not self.managed(name):
            return Status.UNREACHABLE, (
                f"nothing listens at {where} ({why} for {refused_for:.0f} s, past its "
                f"warm-up bound of {bound:.0f} s; check its URL, or that the engine runs)"
            )
        return self._unreachable(state), (
            f"no answer: {why} at {where} for {refused_for:.0f} s (unreachable after {bound:.0f} s)"
        )

    def _judged(self, state: BackendState, verdict: Verdict) -> Status:
        if verdict is Verdict.READY:
            return Status.READY
        if verdict is Verdict.LOADING:
            return Status.STARTING if self._within_grace(state) else Status.DEAD
        return Status.DEAD

    def _timed_out(self, state: BackendState, in_a_row: int) -> Status:
        """A slow probe: a ready backend that is still serving, or has not missed enough probes in a
        row, stays ready; anything else is judged like no answer."""
        if state.status is Status.READY:
            serving = self.registry.served_within(state.config.name, self.config.passive_window_s)
            if serving or in_a_row < self.config.timeouts_to_dead:
                return Status.READY
        return self._unreachable(state)

    def _unreachable(self, state: BackendState) -> Status:
        if state.ever_ready and state.status is not Status.STARTING:
            return Status.DEAD
        return Status.STARTING if self._within_grace(state) else Status.DEAD

    def _within_grace(self, state: BackendState) -> bool:
        # From when it was first seen not ready in this spell (its creation, for one never ready), kept
        # across status changes: counting from the last change would flip a dead backend back to
        # starting at every probe.
        if state.status is Status.READY:
            return True
        since = self._unready_since.setdefault(state.config.name, state.since)
        return self.registry.clock() - since <= self.config.startup_grace_s

    async def _discover(self, state: BackendState) -> None:
        async def fetch(path: str) -> Any:
            try:
                status, body = await self._get(state, path)
            except OSError:  # TimeoutError included
                return None
            return body if status == 200 else None

        try:
            found = await FLAVORS[state.config.flavor].discover(fetch)
        except Exception:  # discovery is best effort: declared config and defaults still apply
            log.exception("capability discovery failed for %s", state.config.name)
            found = Capabilities()
        state.discovered_context = found.context_length
        state.discovered_modalities = found.modalities
        state.served_models = found.served_models
        state.discovered_capacity = found.capacity

    async def _get(self, state: BackendState, path: str) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {state.config.api_key}"} if state.config.api_key else {}
        status, raw = await self._fetch(state.config.url + path, headers, self.config.timeout_s)
        try:
            return status, orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            return status, None
