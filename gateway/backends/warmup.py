"""Warm-up truth: since when each backend has been warming up, and when it is expected to be ready.

A backend is warming while the registry says it may come back (starting, not probed yet, or down after
having served, within the startup grace). Its warm-up began when the gateway first saw it not ready: when
it left ready, or when the gateway started while it was loading. The expected warm-up E of a backend is,
first found of:

1. learned: the median of its last `SAMPLES_KEPT` warm-ups the gateway saw end (not ready -> ready);
2. configured: its `warmup_s` in the settings;
3. its flavor's default (backends/flavors.py, with the field reports behind each number).

`Warmups` is fed by the registry's status transitions (a listener) and reads the registry's clock, so
"expected ready at" is `since + E`. Learned warm-ups are kept in `warmup.json` in the gateway's state
directory (none: nothing is persisted), so a restarted gateway still knows how long its engines take;
like the live measurements, they are restored only into a backend of the same name, URL and served
models (another engine behind the name loads in its own time).
Bounded: at most `SAMPLES_KEPT` samples per configured backend, one start time per configured backend.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.backends.flavors import FLAVORS
from gateway.backends.identity import BackendIdentity, identity
from gateway.backends.registry import Registry, Status
from gateway.backends.samples_file import SamplesFile

log = logging.getLogger(__name__)

FILE_NAME = "warmup.json"
# The median of five is robust to one odd warm-up (a cold compile cache, a host busy downloading) and
# follows a changed engine configuration after three warm-ups.
SAMPLES_KEPT = 5
# A "warm-up" longer than this was downtime (a backend left down until someone restarted it), not
# loading: big engines load in 5 to 20 minutes (about 13 in the field reports behind flavors.py).
MAX_SAMPLE_S = 3600.0

LEARNED, CONFIGURED, FLAVOR_DEFAULT = "learned", "configured", "flavor default"


@dataclass(frozen=True, slots=True)
class Warming:
    """One warming backend at one moment, in seconds of the registry's clock."""

    backend: str
    since: float  # when the gateway first saw it not ready
    expected_s: float  # E: its expected warm-up
    source: str  # where E comes from: learned | configured | flavor default
    elapsed_s: float  # since `since`
    restarting: bool  # it served before (crash or restart), rather than loading for the first time

    @property
    def eta_s(self) -> float:
        """Seconds left until it is expected ready; 0 once it is late."""
        return max(0.0, self.expected_s - self.elapsed_s)

    @property
    def overdue(self) -> bool:
        return self.elapsed_s > self.expected_s


class Warmups:
    """Warm-up start times and learned warm-up durations of every configured backend."""

    def __init__(
        self, registry: Registry, state_dir: Path | None, wall: Callable[[], float] = time.time
    ) -> None:
        self.registry = registry
        self.wall = wall  # epoch seconds, only to show times to operators
        path = Path(state_dir) / FILE_NAME if state_dir is not None else None
        self._file = SamplesFile(path, "backends", SAMPLES_KEPT, MAX_SAMPLE_S, "warm-up", log)
        now = registry.clock()
        # Every backend is "not ready yet" when the gateway starts; one already serving at its first
        # probe was never seen warming, so it teaches nothing (see on_status).
        # Backends added at run time (engine containers) are not followed here, whenever they were added:
        # their warm-up is their last status change (see `warming`), which the engine manager sets.
        self._since: dict[str, float] = dict.fromkeys(registry.configured, now)
        self._seen_not_ready: set[str] = set()
        self._learned: dict[str, deque[float]] = {
            name: deque(maxlen=SAMPLES_KEPT) for name in registry.configured
        }
        self._load()

    # -- fed by the registry --

    def on_status(self, backend: str, status: Status) -> None:
        """Registry listener: a backend leaving ready starts a warm-up; becoming ready ends one, and a
        warm-up the gateway saw (it was probed not ready) is learned."""
        if backend not in self._learned:
            return
        now = self.registry.clock()
        if status is Status.UNREACHABLE:  # nothing listened: downtime, not a warm-up to learn from
            self._since.pop(backend, None)
            self._seen_not_ready.discard(backend)
            return
        if status is not Status.READY:
            self._since.setdefault(backend, now)
            self._seen_not_ready.add(backend)
            return
        since = self._since.pop(backend, None)
        if since is not None and backend in self._seen_not_ready:
            self._learn(backend, now - since)
        self._seen_not_ready.discard(backend)

    # -- what the gateway knows --

    def expected(self, backend: str) -> tuple[float, str]:
        """E for `backend` and where it comes from."""
        learned = self._learned.get(backend)
        if learned:
            return statistics.median(learned), LEARNED
        config = self.registry.backends[backend].config
        if config.warmup_s is not None:
            return config.warmup_s, CONFIGURED
        return FLAVORS[config.flavor].warmup_s, FLAVOR_DEFAULT

    def is_warming(self, backend: str) -> bool:
        return self.registry.may_come_back(backend)

    def all_warming(self, backends: Iterable[str]) -> bool:
        """True when there is at least one backend and every one is warming (none serves, none full)."""
        seen = False
        for name in backends:
            if not self.is_warming(name):
                return False
            seen = True
        return seen

    def warming(self, backend: str) -> Warming | None:
        if not self.is_warming(backend):
            return None
        now = self.registry.clock()
        state = self.registry.backends[backend]
        # A backend added at run time (an engine container) is not followed here: its warm-up began at
        # its last status change (started, or left ready), so a waiting request is told the time left.
        since = self._since.get(backend, state.since)
        expected_s, source = self.expected(backend)
        restarting = state.ever_ready and state.status is not Status.READY
        return Warming(backend, since, expected_s, source, now - since, restarting)

    def unreachable_after(self, backend: str, startup_grace_s: float) -> float:
        """How long refused connections may last before nothing listening is the verdict (the prober's
        `warmup_bound`): a learned or configured E as it is; the flavor's default, a guess, no shorter
        than the operator's startup grace (a deployment that allows 30 minutes to load means it)."""
        expected_s, source = self.expected(backend)
        return expected_s if source != FLAVOR_DEFAULT else max(expected_s, startup_grace_s)

    def first_ready(self, backends: Iterable[str]) -> Warming | None:
        """The warming backend of `backends` expected ready first; None unless every one is warming."""
        views = [self.warming(name) for name in backends]
        if not views or any(view is None for view in views):
            return None
        return min((view for view in views if view is not None), key=lambda view: view.eta_s)

    def details(self, backend: str) -> dict[str, Any]:
        """The warm-up fields of one backend for /gateway/backends (times in epoch seconds)."""
        expected_s, source = self.expected(backend)
        out: dict[str, Any] = {
            "warmup_expected_s": round(expected_s, 1),
            "warmup_source": source,
            "warmup_learned_s": [round(s, 1) for s in self._learned.get(backend, ())],
            "warming_since": None,
            "expected_ready_at": None,
            "eta_s": None,
        }
        view = self.warming(backend)
        if view is not None:
            now = self.wall()
            out["warming_since"] = round(now - view.elapsed_s, 3)
            out["expected_ready_at"] = round(now + view.expected_s - view.elapsed_s, 3)
            out["eta_s"] = round(view.eta_s, 1)
        return out

    # -- learning and persistence --

    def _learn(self, backend: str, seconds: float) -> None:
        if not 0 < seconds <= MAX_SAMPLE_S:
            return
        self._learned[backend].append(seconds)
        expected_s = self.expected(backend)[0]
        log.info("backend %s warmed up in %.1fs; expecting %.1fs next time", backend, seconds, expected_s)
        self._save()

    def _save(self) -> None:
        self._file.save({self._identity(name): samples for name, samples in self._learned.items()})

    def _load(self) -> None:
        for saved, samples in self._file.load().items():
            # A backend no longer configured, or another engine behind its name, is forgotten.
            if saved.name in self._learned and saved == self._identity(saved.name):
                self._learned[saved.name].extend(samples)

    def _identity(self, backend: str) -> BackendIdentity:
        served = (pool.served_name(backend) for pool in self.registry.pools if backend in pool.backends)
        return identity(backend, self.registry.backends[backend].config.url, served)
