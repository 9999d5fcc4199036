"""Each backend's engine-wide slow-down (routing/slowdown/reading.py has the pure reading), kept as a memory
that the producer side writes and the decisions only read.

`refresh` takes a reading of a backend's requests in flight at the windows' clock (once per clock reading,
the first profile asked for leading) and remembers it, with its episode (episodes.py): the router
runs it for the backends a request is scored on before it scores them (router.PolicyRouter.route), as
samples and stream progress arrive between two clock readings. `of`, `latest`, `suspect` and
`remembered` read that memory and change nothing, so a decision, and explain's preview of it, is a pure
function of the memory and the windows: every profile's cell of a backend is scaled by the same factor,
and the next reading holds it where its evidence is thin (`before`). The decode paces a reading uses are
refitted only when a cell's samples change (pure memoization). Bounded like the windows."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gateway.policy.schema import MIN_SAMPLES, Adaptive
from gateway.records import Progress, Sample
from gateway.routing.model.cells import CellModel, ModelCache, Windows
from gateway.routing.slowdown.episodes import Episode, next_episode, starts
from gateway.routing.slowdown.reading import DecodePace, Slowdown, decode_pace, engine_slowdown, live_ratios

# A backend's requests in flight as far as each has gone (stats/progress.py).
InFlightProgress = Callable[[str], Progress]
NO_SLOWDOWN = Slowdown()
# Profiles remembered per backend for its slow-down's shift (policies have a handful).
MAX_PROFILES = 64


class EngineSlowdowns:
    """Per backend, its slow-down as of the windows' clock, from its requests in flight (`progress`; None:
    finished requests are all it sees) and the cells of the profiles it was scored for."""

    def __init__(self, windows: Windows, cache: ModelCache, progress: InFlightProgress | None) -> None:
        self.windows = windows
        self.cache = cache
        self.progress = progress
        self._paces: dict[tuple[str, str], tuple[int, DecodePace]] = {}  # cell -> (its version, pace)
        self._profiles: dict[str, dict[str, None]] = {}  # backend -> the profiles it was scored for
        self._slowed: dict[str, tuple[float, Slowdown]] = {}  # backend -> (when found, its slow-down)
        self._episodes: dict[str, Episode] = {}  # backend -> its newest slow-down episode (episodes.py)

    def profiles(self, backend: str) -> list[str]:
        """The profiles `backend` was scored for (the newest MAX_PROFILES)."""
        return list(self._profiles.get(backend, ()))

    def latest(self, backend: str) -> Slowdown | None:
        """The slow-down found last for `backend` (as of the decision under way, once `refresh` has run)."""
        known = self._slowed.get(backend)
        return known[1] if known is not None else None

    def suspect(self, backend: str, knobs: Adaptive) -> Slowdown | None:
        """`backend`'s slow-down beyond the policy's tolerance as of the decision under way, or else the
        newest one seen within its `refresh_s` or the windows' span, the longer (None: neither). Once the
        fits have taken a slow-down in, the engine's requests read on them and its factor falls back to 1
        though it never recovered: the profiles it has not served since would follow the prefer order
        back to it (a throttled q475-dflash took a whole chat phase and the burst after it, every request
        twice as long as on its neighbour). While the windows may hold answers of its healthy days, a
        profile measured then would vouch for it: with the refresh bound alone, a one-Spark pair
        throttled in its 4-user phase sent its chat phase, never measured, back to the throttled engine
        two minutes on. How slow its cells then read is `remembered`."""
        latest = self.latest(backend)
        if latest is not None and latest.beyond(knobs.tolerance):
            return latest
        episode = self._episodes.get(backend)
        bound = max(knobs.refresh_s, self.windows.max_age_s)
        if episode is None or not episode.recent(self.windows.now(), bound, knobs.tolerance):
            return None
        return episode.slowed

    def remembered(self, backend: str, profile: str | None, at: float, tolerance: float) -> float:
        """The factor by which `backend`'s cell of `profile` (None: its all-profile model) is slower than
        its fit says, by what is remembered (episodes.py): its newest episode's live factor, where
        that was beyond `tolerance` and the cell was measured mostly before it began; else 1. However long
        ago it was seen: a throttle is not undone by time passing, and a cell stops being scaled as its
        own answers since outnumber the old (on a one-Spark pair throttled in its 4-user phase, the
        16-user burst four minutes on took fp8-mtp's chats of before the throttle for its pace against
        fp8-base, as twice as fast as fp8-base, and piled onto it)."""
        episode = self._episodes.get(backend)
        if episode is None or not episode.slowed.beyond(tolerance):
            return 1.0
        samples = (
            self.windows.backend_samples(backend, at)
            if profile is None
            else self.windows.samples(backend, profile, at)
        )
        stale = episode.predates(profile, samples)
        return episode.slowed.live if stale else 1.0

    def view(self, backend: str) -> Progress:
        """`backend`'s requests in flight as this book reads them (none without a progress view)."""
        return self.progress(backend) if self.progress is not None else Progress()

    def decode_ratios(self, backend: str, profile: str, at: float, progress: Progress) -> list[float]:
        """How many times slower than its decode-pace fits each of `backend`'s streams in `progress`
        decodes, for those read at their pace (slowdown.live_ratios, decode only); `profile` leads as in
        `of`, whose shift they predict with."""
        cell, pace = self._readers(backend, at)
        profiles = [profile, *self._profiles.get(backend, ()), *(r.profile for r in progress.requests)]
        shift = max((pace(p).shift for p in dict.fromkeys(profiles)), default=1.0)
        return live_ratios(progress, cell, pace, shift, min_samples=MIN_SAMPLES, decode_only=True)

    def adopt(self, backend: str, at: float, slowed: Slowdown) -> None:
        """Take a reading made in another book as `backend`'s latest, held as any reading is (the stream
        mover's, as it moves the streams it was read from off the engine)."""
        self._remember(backend, at, slowed)

    def of(self, backend: str, profile: str, at: float) -> Slowdown:
        """`backend`'s slow-down as remembered (no slow-down when never read): a decision's read, which
        changes nothing. Under a decision, `refresh` has taken it at the decision's clock reading."""
        return self.latest(backend) or NO_SLOWDOWN

    def refresh(self, backend: str, profile: str, at: float) -> Slowdown:
        """Take and remember `backend`'s slow-down as of `at`, once per clock reading (the first profile
        asked for leads; `profile` joins those it was scored for). The producer's step: a decision then
        reads it through `of`."""
        known = self._slowed.get(backend)
        seen = self._profiles.setdefault(backend, {})
        if profile not in seen:
            if len(seen) >= MAX_PROFILES:
                del seen[next(iter(seen))]
            seen[profile] = None
        if known is not None and known[0] == at:
            return known[1]
        progress = self.view(backend)
        cell, pace = self._readers(backend, at)
        profiles = [profile, *(p for p in seen if p != profile)]
        profiles += {r.profile: None for r in progress.requests if r.profile not in seen}
        last = known[1] if known is not None else None
        slowed = engine_slowdown(progress, profiles, cell, pace, min_samples=MIN_SAMPLES, at=at, before=last)
        self._remember(backend, at, slowed)
        return slowed

    def _readers(
        self, backend: str, at: float
    ) -> tuple[Callable[[str], CellModel], Callable[[str], DecodePace]]:
        """`backend`'s cell model and decode pace per profile, as of `at` (cached by the cells' versions)."""

        def cell(profile: str) -> CellModel:
            return self.cache.get(self.windows, backend, profile, at)

        def pace(profile: str) -> DecodePace:
            return self.pace(backend, profile, at)

        return cell, pace

    def _remember(self, backend: str, at: float, slowed: Slowdown) -> None:
        if backend not in self._slowed and len(self._slowed) >= self.windows.max_cells:
            del self._slowed[next(iter(self._slowed))]
        previous = self._slowed.get(backend)
        self._slowed[backend] = (at, slowed)
        if slowed.live <= 1.0:
            return
        before, last = self._episodes.get(backend), previous and previous[1]
        newest = self._newest_samples(backend, at) if starts(before, last, slowed) else {}
        episode = next_episode(before, last, slowed, at, newest)
        if episode is not None:
            if backend not in self._episodes and len(self._episodes) >= self.windows.max_cells:
                del self._episodes[next(iter(self._episodes))]
            self._episodes[backend] = episode

    def _newest_samples(self, backend: str, at: float) -> dict[str | None, Sample | None]:
        """Per profile `backend` was scored for (None: its all-profile model), its newest sample now:
        read only as an episode starts, not at every slowed reading."""

        def newest(samples: Sequence[Sample]) -> Sample | None:
            return samples[-1] if samples else None

        found: dict[str | None, Sample | None] = {
            p: newest(self.windows.samples(backend, p, at)) for p in self._profiles.get(backend, ())
        }
        found[None] = newest(self.windows.backend_samples(backend, at))
        return found

    def pace(self, backend: str, profile: str, at: float) -> DecodePace:
        """The cell's decode pace over its finished streams, cached until its samples change."""
        key = (backend, profile)
        version = self.windows.version(backend, profile, at)
        cached = self._paces.get(key)
        if cached is None or cached[0] != version:
            if key not in self._paces and len(self._paces) >= self.windows.max_cells:
                del self._paces[next(iter(self._paces))]
            cached = self._paces[key] = (version, decode_pace(self.windows.samples(backend, profile, at)))
        return cached[1]
