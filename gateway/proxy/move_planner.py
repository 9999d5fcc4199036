"""Which streams under way leave an engine seen slowed: the live windows and requests in flight read for
proxy/move_choice.py's pure decisions, every second the stream mover asks (proxy/moves.py), off the path of
any request.

The reading is the mover's own: fits of its own and a view of the requests in flight that keeps no
readings (`peek`), so that reading every second changes nothing the routing decisions read. A move hands
its reading over to them (`handover`): the streams that left leave no requests in flight there to read it
from again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from gateway.proxy.move_choice import (
    Destination,
    MoveQuestion,
    Underway,
    expected_left,
    moving_off,
    pace_changes,
    plan_moves,
)
from gateway.records import BackendSnapshot
from gateway.routing.model.cells import CellModel, ModelCache, Windows
from gateway.routing.model.predict import PredictConfig
from gateway.routing.slowdown.memory import EngineSlowdowns, InFlightProgress
from gateway.routing.slowdown.reading import scaled


class SlowedEngineMoves:
    """The stream mover's planner (proxy/moves.MovePlanner) over one router's windows."""

    def __init__(
        self,
        windows: Windows,
        peek: InFlightProgress | None,
        devices: Mapping[str, str],
        handover: EngineSlowdowns,
    ) -> None:
        self.windows = windows
        self.devices = devices  # backend -> shared device; absent: a device of its own
        self.handover = handover  # the routing decisions' slow-downs, told of a reading that moved streams
        self._peeks = EngineSlowdowns(windows, ModelCache(windows.max_cells), peek)

    def moves(self, question: MoveQuestion) -> list[bool]:
        """Which of the question's streams to finish on its destination now (proxy/move_choice.py): none
        unless their engine is seen slowed beyond doubt, as of now (a closed loop of users all waiting
        on it makes no decision to read it in)."""
        backend, profile, streams, to = question.backend, question.profile, question.streams, question.to
        knobs = question.knobs
        at = self.windows.now()
        progress = self._peeks.view(backend)
        ratios = self._peeks.decode_ratios(backend, profile, at, progress)
        if not moving_off(ratios, pace_changes(progress), knobs.tolerance):
            return [False] * len(streams)
        loads = {b.name: b.inflight for b in question.backends}

        def busy_beside(name: str) -> bool:  # an engine of its device other than these two is busy
            device = self.devices.get(name)
            others = (b for b, d in self.devices.items() if device is not None and d == device)
            return any(loads.get(b, 0) > 0 for b in others if b not in (backend, to))

        def engine(name: str) -> CellModel:
            model = self._peeks.cache.backend(self.windows, name, at)
            return scaled(model, self._peeks.refresh(name, profile, at).for_cell(model))

        there = Destination(to, loads.get(to, 0), engine(to), busy_beside(to))
        config = PredictConfig(min_samples=knobs.min_samples)
        here, inflight = engine(backend), loads.get(backend, 0)
        streams = self._with_lefts(streams, profile, question.backends, at, knobs.min_samples)
        moved = plan_moves(here, inflight, busy_beside(backend), streams, there, knobs.tolerance, config)
        if any(moved):  # the reading `engine` scaled it by, found at `at` already
            self.handover.adopt(backend, at, self._peeks.refresh(backend, profile, at))
        return moved

    def _with_lefts(
        self,
        streams: Sequence[Underway],
        profile: str,
        backends: Sequence[BackendSnapshot],
        at: float,
        min_samples: int,
    ) -> list[Underway]:
        """The streams, those without a token limit given what the profile's finished answers on the
        pool's backends say they will still write (move_choice.expected_left)."""
        if all(s.left is not None for s in streams):
            return list(streams)
        outputs = [
            sample.output_tokens
            for b in backends
            for sample in self.windows.samples(b.name, profile, at)
            if not sample.error
        ]
        return [
            s if s.left is not None else replace(s, left=expected_left(s.generated, outputs, min_samples))
            for s in streams
        ]
