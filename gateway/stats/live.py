"""Live measurements per (backend, profile): rolling, time-bounded windows of finished requests.

Every finished request becomes one `Sample` recorded in the window of the backend that served it and the
profile it was classified into. Windows are bounded three ways so memory stays flat whatever the traffic:
by age (`max_age_s`), by samples per cell (`max_samples`, the newest win) and by the number of cells
(`max_cells`, the cell recorded least recently is dropped first).

Latency rules (docs/measurement.md): TPOT is decode time only, `(e2e - ttft) / (output_tokens - 1)`; TTFT is
never divided by a token count and never mixed into per-token speed.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gateway.clock import epoch
from gateway.records import Sample

Clock = Callable[[], float]


Entry = tuple[float, Sample]  # (recorded_at, sample)


@dataclass(frozen=True, slots=True)
class CellSummary:
    """What one window says right now. Latency figures exclude failed requests; None means no data."""

    count: int
    errors: int
    error_rate: float
    ttft_p50: float | None
    ttft_p95: float | None
    tpot_mean: float | None
    tpot_p95: float | None
    itl_mean: float | None
    decode_tps_mean: float | None
    e2e_p50: float | None
    e2e_p95: float | None
    output_tokens_mean: float | None
    prompt_tokens_mean: float | None
    concurrency_mean: float | None
    newest_age_s: float | None  # seconds since the newest sample was recorded

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


EMPTY_SUMMARY = CellSummary(0, 0, 0.0, *([None] * 12))


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]) of unsorted values; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(entries: Sequence[Entry], now: float) -> CellSummary:
    """Summary of (recorded_at, sample) pairs; pure, so the recorder and tests share one formula."""
    if not entries:
        return EMPTY_SUMMARY
    samples = [sample for _, sample in entries]
    ok = [s for s in samples if not s.error]
    errors = len(samples) - len(ok)
    ttfts = [s.ttft for s in ok if s.ttft is not None]
    tpots = [t for t in (s.tpot for s in ok) if t is not None]
    itls = [s.mean_itl for s in ok if s.mean_itl is not None]
    tps = [v for v in (s.decode_tps for s in ok) if v is not None]
    e2es = [s.e2e for s in ok]
    return CellSummary(
        count=len(samples),
        errors=errors,
        error_rate=errors / len(samples),
        ttft_p50=percentile(ttfts, 50),
        ttft_p95=percentile(ttfts, 95),
        tpot_mean=_mean(tpots),
        tpot_p95=percentile(tpots, 95),
        itl_mean=_mean(itls),
        decode_tps_mean=_mean(tps),
        e2e_p50=percentile(e2es, 50),
        e2e_p95=percentile(e2es, 95),
        output_tokens_mean=_mean([float(s.output_tokens) for s in ok]),
        prompt_tokens_mean=_mean([float(s.prompt_tokens) for s in samples]),
        concurrency_mean=_mean([float(s.concurrency) for s in samples]),
        newest_age_s=max(0.0, now - max(at for at, _ in entries)),
    )


class _Cell:
    __slots__ = ("window", "version")

    def __init__(self, max_samples: int) -> None:
        self.window: deque[Entry] = deque(maxlen=max_samples)  # appending when full drops the oldest
        self.version = 0


class LiveRecorder:
    """Rolling windows of `Sample`s keyed by (backend, profile).

    Time is wall-clock epoch seconds, either passed in as `now` or read from the injected `clock`, so tests
    are deterministic and snapshots written by one process mean the same thing to the next.
    """

    def __init__(
        self,
        *,
        max_age_s: float = 600.0,
        max_samples: int = 256,
        max_cells: int = 512,
        clock: Clock = epoch,
    ) -> None:
        if max_age_s <= 0 or max_samples < 1 or max_cells < 1:
            raise ValueError("max_age_s, max_samples and max_cells must be positive")
        self.max_age_s = max_age_s
        self.max_samples = max_samples
        self.max_cells = max_cells
        self._clock = clock
        # Least recently recorded cell first, so evicting the first entry drops the coldest cell.
        self._cells: OrderedDict[tuple[str, str], _Cell] = OrderedDict()
        self._changes = 0  # recorder-wide, so a version is never reused, even by a re-created cell

    def record(self, backend: str, profile: str, sample: Sample, now: float | None = None) -> None:
        at = self._clock() if now is None else now
        key = (backend, profile)
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = _Cell(self.max_samples)
            while len(self._cells) > self.max_cells:
                self._cells.popitem(last=False)
        else:
            self._cells.move_to_end(key)
        cell.window.append((at, sample))
        self._touch(cell)
        self._expire(cell, at)

    def version(self, backend: str, profile: str, now: float | None = None) -> int:
        """Changes whenever the cell's live contents change (0: no cell): lets callers cache derived data."""
        cell = self._cells.get((backend, profile))
        if cell is None:
            return 0
        self._expire(cell, self._now(now))
        return cell.version

    def entries(self, backend: str, profile: str, now: float | None = None) -> tuple[Entry, ...]:
        """The live (recorded_at, sample) pairs of one cell, oldest first."""
        cell = self._cells.get((backend, profile))
        if cell is None:
            return ()
        self._expire(cell, self._now(now))
        return tuple(cell.window)

    def samples(self, backend: str, profile: str, now: float | None = None) -> tuple[Sample, ...]:
        return tuple(sample for _, sample in self.entries(backend, profile, now))

    def backend_version(self, backend: str, now: float | None = None) -> tuple[int, ...]:
        """The versions of every live cell of `backend` (any profile): changes whenever one of them does."""
        at = self._now(now)
        return tuple(self.version(b, p, at) for b, p in list(self._cells) if b == backend)

    def backend_samples(self, backend: str, now: float | None = None) -> tuple[Sample, ...]:
        """Every live sample of `backend`, all profiles together, oldest first (what the device does to it
        is not specific to a profile)."""
        at = self._now(now)
        keys = [key for key in self._cells if key[0] == backend]
        entries = sorted((e for b, p in keys for e in self.entries(b, p, at)), key=lambda e: e[0])
        return tuple(sample for _, sample in entries)

    def summary(self, backend: str, profile: str, now: float | None = None) -> CellSummary:
        at = self._now(now)
        return summarize(self.entries(backend, profile, at), at)

    def cells(self, now: float | None = None) -> Iterator[tuple[str, str, tuple[Entry, ...]]]:
        """Every non-empty cell as (backend, profile, entries); expired cells are dropped on the way."""
        at = self._now(now)
        for key in list(self._cells):
            cell = self._cells[key]
            self._expire(cell, at)
            if not cell.window:
                del self._cells[key]
                continue
            yield key[0], key[1], tuple(cell.window)

    def to_dict(self, now: float | None = None) -> dict[str, Any]:
        """JSON-able view for GET /gateway/stats: {"window", "backends": {backend: {profile: summary}}}."""
        at = self._now(now)
        backends: dict[str, dict[str, Any]] = {}
        for backend, profile, entries in self.cells(at):
            backends.setdefault(backend, {})[profile] = summarize(entries, at).to_dict()
        window = {"max_age_s": self.max_age_s, "max_samples": self.max_samples, "max_cells": self.max_cells}
        return {"window": window, "backends": backends}

    def __len__(self) -> int:
        """Number of cells held (expired ones included until they are next touched)."""
        return len(self._cells)

    def now(self) -> float:
        """The recorder's clock (wall-clock epoch seconds unless a clock was injected)."""
        return self._clock()

    def _now(self, now: float | None) -> float:
        return self._clock() if now is None else now

    def _touch(self, cell: _Cell) -> None:
        self._changes += 1
        cell.version = self._changes

    def _expire(self, cell: _Cell, now: float) -> None:
        horizon = now - self.max_age_s
        window = cell.window
        if window and window[0][0] < horizon:
            while window and window[0][0] < horizon:
                window.popleft()
            self._touch(cell)
