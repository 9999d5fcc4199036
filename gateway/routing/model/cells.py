"""Cell models: what one (backend, profile) window of live samples says, reduced to what a prediction needs,
and their cache. The windows themselves live with the caller (stats.live.LiveRecorder): the router reads
them through `Windows`, and never records anything."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.records import Sample
from gateway.routing.model.fitting import Fit
from gateway.routing.model.regime import current_regime, fit_current

# The newest requests whose load says how busy an engine tends to be now: about one full batch of a busy
# engine (seed 003 runs 16 at once), enough to average a burst out and recent enough to follow it.
RECENT_REQUESTS = 16
# A prompt whose repetition share (records.Features.repetition) is at least this is repetitive content:
# a speculative engine copies most drafts from it, so its decode speed there is another figure than on
# novel prose. Half the 4-grams repeating is well clear of prose (~0) and of quoted files or edits (~0.8).
REPETITIVE = 0.5


class Windows(Protocol):
    """The live windows the router reads (stats.live.LiveRecorder satisfies it). `now` is the windows' own
    clock; a version changes whenever the samples it covers change, so derived data can be cached."""

    @property
    def max_age_s(self) -> float: ...

    @property
    def max_cells(self) -> int: ...

    def now(self) -> float: ...

    def version(self, backend: str, profile: str, now: float | None = None) -> int: ...

    def samples(self, backend: str, profile: str, now: float | None = None) -> Sequence[Sample]: ...

    def backend_version(self, backend: str, now: float | None = None) -> Hashable: ...

    def backend_samples(self, backend: str, now: float | None = None) -> Sequence[Sample]: ...


@dataclass(frozen=True, slots=True)
class CellModel:
    """What one cell's samples say, reduced to what a prediction needs; cheap to evaluate at any c."""

    samples: int  # successful samples with a TTFT
    ttft: Fit | None
    tpot: Fit | None
    mean_e2e: float
    mean_output_tokens: float
    levels: str  # measured concurrency span, e.g. "1..16"
    recent_concurrency: float = 0.0  # mean load its newest requests met: how busy it tends to be now
    # Newest samples that left the fit of the older ones by being slower (regime.current_regime; 0: no
    # slow-down seen): the backend slowed that many samples ago, so what the router knows of the others
    # was compared against a faster backend. A speed-up makes no other backend more attractive.
    regime_run: int = 0
    # TPOT per content, novel and repetitive (None: no samples of that content), and how many samples each
    # holds: one fit over both would average a speculative engine's two decode speeds.
    tpot_by_content: tuple[Fit | None, Fit | None] = (None, None)
    content_samples: tuple[int, int] = (0, 0)
    # The prompts its TTFT was measured on (usage.prompt_tokens; 0: none told): their mean and the longest.
    mean_prompt_tokens: float = 0.0
    max_prompt_tokens: int = 0

    def measured_content(self, repetition: float, min_samples: int) -> bool:
        """Whether min_samples of its samples carry this request's content (repetitive or novel)."""
        return self.content_samples[int(repetitive(repetition))] >= min_samples

    def tpot_for(self, repetition: float, min_samples: int) -> Fit | None:
        """The TPOT fit for a request of this content: its content's own once that holds min_samples,
        else the cell's over all content."""
        i = int(repetitive(repetition))
        own = self.tpot_by_content[i]
        return own if own is not None and self.content_samples[i] >= min_samples else self.tpot


@dataclass(frozen=True, slots=True)
class CellView:
    """What the scorer knows about one backend for this profile."""

    model: CellModel
    count: int  # all samples in the window, failed ones included
    errors: int

    @property
    def error_rate(self) -> float:
        return self.errors / self.count if self.count else 0.0


def repetitive(repetition: float) -> bool:
    return repetition >= REPETITIVE


def build_model(samples: Sequence[Sample]) -> CellModel:
    ok = [s for s in samples if not s.error and s.ttft is not None]
    if not ok:
        return CellModel(0, None, None, 0.0, 0.0, "-")
    ttft_points = [(float(s.concurrency), s.device_share, s.ttft) for s in ok if s.ttft is not None]
    tpot_points = [(float(s.concurrency), s.device_share, t) for s in ok if (t := s.tpot) is not None]
    content = [repetitive(s.repetition) for s in ok if s.tpot is not None]
    by_content = [
        [p for p, rep in zip(tpot_points, content, strict=True) if rep == want] for want in (False, True)
    ]
    levels = sorted({s.concurrency for s in ok})
    span = str(levels[0]) if len(levels) == 1 else f"{levels[0]}..{levels[-1]}"
    recent = ok[-RECENT_REQUESTS:]
    ttft, ttft_run = current_regime(ttft_points)
    tpot, tpot_run = current_regime(tpot_points)
    return CellModel(
        samples=len(ok),
        ttft=ttft,
        tpot=tpot,
        mean_e2e=sum(s.e2e for s in ok) / len(ok),
        mean_output_tokens=sum(s.output_tokens for s in ok) / len(ok),
        levels=span,
        recent_concurrency=sum(s.concurrency for s in recent) / len(recent),
        regime_run=max(ttft_run, tpot_run, 0),
        # Only when both contents were seen: otherwise the cell's own fit is that content's.
        tpot_by_content=(fit_current(by_content[0]), fit_current(by_content[1]))
        if all(by_content)
        else (None, None),
        content_samples=(len(by_content[0]), len(by_content[1])),
        mean_prompt_tokens=sum(s.prompt_tokens for s in ok) / len(ok),
        max_prompt_tokens=max(s.prompt_tokens for s in ok),
    )


class ModelCache:
    """CellModels per (backend, profile), rebuilt only when the windows say the cell changed.

    Fitting 256 samples costs a few hundred microseconds in Python; a decision touches every eligible
    backend, so the fit is cached and invalidated by the cell's version. Bounded like the recorder.
    """

    def __init__(self, max_entries: int = 512) -> None:
        self._max = max_entries
        self._models: dict[tuple[str, str], tuple[int, CellModel]] = {}
        self._backends: dict[str, tuple[Hashable, CellModel]] = {}

    def get(self, windows: Windows, backend: str, profile: str, now: float | None = None) -> CellModel:
        key = (backend, profile)
        version = windows.version(backend, profile, now)
        cached = self._models.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        model = build_model(windows.samples(backend, profile, now))
        if key not in self._models and len(self._models) >= self._max:
            del self._models[next(iter(self._models))]  # oldest insertion first: cheap and bounded
        self._models[key] = (version, model)
        return model

    def backend(self, windows: Windows, backend: str, now: float | None = None) -> CellModel:
        """The model over all of `backend`'s samples (every profile): how load and its device slow it."""
        version = windows.backend_version(backend, now)
        cached = self._backends.get(backend)
        if cached is not None and cached[0] == version:
            return cached[1]
        model = build_model(windows.backend_samples(backend, now))
        if backend not in self._backends and len(self._backends) >= self._max:
            del self._backends[next(iter(self._backends))]
        self._backends[backend] = (version, model)
        return model
