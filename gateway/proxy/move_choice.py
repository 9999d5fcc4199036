"""Whether a stream under way on an engine seen running slower than measured should be finished on another
(docs/measurement.md, section 8). Pure functions on plain data.

An engine that slows mid-run (thermal throttling, a neighbour's job, a bad restart) takes every request
already running there down with it: the router sends the next ones elsewhere, but a 16-user batch that
started a second before the slow-down runs to its end 2.5x slower, and on a shared device keeps the
engine the traffic moved to sharing it. A stream whose answer can be continued elsewhere
(proxy/resume.py) can instead be moved: cut here, and its prompt with what it generated so far sent to
another engine, which prefills it and writes the rest. Per stream, with `left` tokens it may still write:

    stay = left x TPOT_here(n_here)                           (the engine's fit, scaled by its slow-down)
    move = TTFT_there(n_there + 1, prompt + generated) + left x TPOT_there(n_there + 1)

and it moves when stay > move x (1 + margin). Streams are taken longest first, each one moved counting in
the destination's load for the next. `left` is the request's token limit less what it wrote, or for one
without a limit what the profile's finished answers that went as far wrote beyond it (`expected_left`).
A destination sharing the slowed engine's device is predicted with the device to itself unless a third
engine of it is busy: the streams that leave empty the slowed one.
Nothing is weighed before the engine is seen slowed beyond doubt (`moving_off`): a move cannot be taken
back, so it acts only on a change of the engine every stream there shows.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.policy.schema import Adaptive
from gateway.records import BackendSnapshot, Progress
from gateway.routing.model.cells import CellModel
from gateway.routing.model.predict import PredictConfig, predict_with_model
from gateway.routing.slowdown.reading import MIN_EVIDENCE, SLOWED, pace_change


@dataclass(frozen=True, slots=True)
class Underway:
    """One stream under way, as far as it has gone."""

    prompt_tokens: int
    generated: int  # tokens it sent so far
    left: int | None  # tokens it may still write; None: the request set no limit (`expected_left`)


@dataclass(frozen=True, slots=True)
class MoveQuestion:
    """Which of `backend`'s streams under way (`streams`, of `profile`) should be finished on `to`, the
    pool's backends as they are now (`backends`), under the policy's adaptive knobs."""

    backend: str
    profile: str
    streams: Sequence[Underway]
    backends: Sequence[BackendSnapshot]
    to: str
    knobs: Adaptive


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a moved stream would be continued: the backend the request's ranking fails over to."""

    backend: str
    inflight: int
    model: CellModel  # its all-profile model, scaled by its own slow-down
    device_busy: bool  # a third engine of its device (not the slowed one) has requests in flight


def moving_off(decode_ratios: Sequence[float], changes: Sequence[float], tolerance: float) -> bool:
    """Whether an engine is slowed sure enough to move its streams: at least MIN_EVIDENCE of its streams
    under way read at their decode pace (slowdown.live_ratios, decode only), every one beyond SLOWED of
    its fits and their median beyond the tolerance; and their own pace changed under way (`changes`:
    each stream's newest gaps over its mean gap so far, `pace_changes`), their median beyond SLOWED.
    A throttled engine slows every stream it runs, from the moment it throttles. Streams steadily slower
    than the fits show the fits' gap, not the engine's change: on spark-home-35b's mixed phase
    q475-dflash's 14 long answers decoded 2.0x its fit from their first frames (a load and context its
    fit never met), and three were moved for it. A move cannot be taken back: it acts on a change."""
    if len(decode_ratios) < MIN_EVIDENCE or min(decode_ratios) < SLOWED:
        return False
    if not changes or statistics.median(changes) < SLOWED:
        return False
    return statistics.median(decode_ratios) > 1.0 + tolerance


def pace_changes(progress: Progress) -> list[float]:
    """Per stream under way read at its pace (slowdown.MIN_FRAMES frames or more), its newest gaps'
    median over its mean gap since its first content: about 1 at a steady pace, above after a slow-down
    that came while it ran."""
    return [change for r in progress.requests if (change := pace_change(r)) is not None]


def expected_left(generated: int, outputs: Sequence[int], min_samples: int) -> int | None:
    """What a stream without a token limit will still write, read from `outputs`, the lengths of its
    profile's finished answers: the median of what those that went past `generated` wrote beyond it. An
    answer that has gone far is likely one of the long ones, so what is left is read among those, not
    from the mean length. None with fewer than `min_samples` of them: nothing says, and it stays. Most
    clients send no limit, so without this no stream of theirs would ever move. The finished answers
    include some cut short (a token limit, a move), so this errs short, and a short estimate moves less."""
    beyond = [length - generated for length in outputs if length > generated]
    if len(beyond) < max(min_samples, 1):
        return None
    return round(statistics.median(beyond))


def worth_moving(stay_s: float, move_s: float | None, margin: float) -> bool:
    """Whether finishing elsewhere (`move_s`, None: not predicted) beats staying by more than `margin`."""
    return move_s is not None and stay_s > move_s * (1.0 + margin)


def plan_moves(
    here: CellModel,
    here_inflight: int,
    here_busy: bool,
    streams: Sequence[Underway],
    there: Destination,
    margin: float,
    config: PredictConfig | None = None,
) -> list[bool]:
    """Per stream (in the order given), whether it moves to `there` (formulas in the module docstring).
    Nothing moves without a decode fit here (no pace to compare against), nor a stream whose `left` is
    unknown (None) or nothing."""
    cfg = config or PredictConfig()
    moved = [False] * len(streams)
    if here.tpot is None or here.samples < cfg.min_samples:
        return moved
    tpot_here = here.tpot.at(here_inflight, here_busy)
    load = there.inflight
    lefts = {i: s.left for i, s in enumerate(streams) if s.left}
    for i in sorted(lefts, key=lambda i: -lefts[i]):
        s, left = streams[i], lefts[i]
        finished = predict_with_model(
            there.backend,
            there.model,
            inflight=load,
            objective="e2e",
            max_output_tokens=left,
            config=cfg,
            device_busy=there.device_busy,
            prompt_tokens=s.prompt_tokens + s.generated,
        )
        if worth_moving(left * tpot_here, finished.value, margin):
            moved[i] = True
            load += 1
    return moved
