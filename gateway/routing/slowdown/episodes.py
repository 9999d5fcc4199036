"""What is remembered of an engine's slow-down after its live reading lapses (docs/measurement.md,
section 8). Pure, on plain data.

A slow-down is read live from requests against fits made before it (routing/slowdown/reading.py). Once the
fits of the profiles the engine kept serving have taken the slow answers in, its requests read on them and the
factor falls back to 1, though the engine never recovered. Two things then go wrong on their own: the prefer
order trusts the engine again, and a profile it has not served since it slowed is predicted by a fit of its
healthy days (a throttled q475-dflash took a whole phase of single-user requests at its pre-throttle pace,
each twice as long as on its neighbour). So an episode remembers, from the first reading of a slow-down: its
newest factor and when it was last seen, and each profile's newest sample when it began. For the policy's
refresh bound or the windows' span after it was last seen, the longer, the engine is still suspect (the prior
demotes it): while the windows may hold answers of its healthy days, those would vouch for it. A cell is
scaled by the remembered factor while most of its samples are from before, however long ago that was: time
alone does not undo a throttle, and the cell's own answers since do, once they outnumber the old. One measured
mostly since reads its own answers, slow ones included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gateway.records import Sample
from gateway.routing.slowdown.reading import Slowdown


@dataclass(frozen=True, slots=True)
class Episode:
    started: float  # the windows' clock at its first reading
    seen: float  # ... at its newest reading with a live factor above 1
    slowed: Slowdown  # that reading
    # Per profile the engine was scored for when it began (None: its all-profile model), its newest
    # sample then (None: it had none).
    newest: Mapping[str | None, Sample | None]

    def recent(self, now: float, within_s: float, tolerance: float) -> bool:
        """Whether it was seen within `within_s` seconds, slowed beyond `tolerance`."""
        return now - self.seen <= within_s and self.slowed.beyond(tolerance)

    def predates(self, profile: str | None, samples: Sequence[Sample]) -> bool:
        """Whether the cell of `profile` (its `samples`, oldest first) was mostly measured before it
        began: more than half its samples are from then, so its fit is mostly the healthy engine's (a
        few answers since, at loads its old ones never met, move it little). A profile unknown then is
        not presumed stale."""
        mark = self.newest.get(profile)
        if mark is None:
            return False
        before = next((len(samples) - i for i, s in enumerate(reversed(samples)) if s is mark), 0)
        return 2 * before > len(samples)


def next_episode(
    episode: Episode | None,
    previous: Slowdown | None,
    slowed: Slowdown,
    at: float,
    newest: Mapping[str | None, Sample | None],
) -> Episode | None:
    """The episode after a reading `slowed` at `at` (`previous`: the reading before it, `newest`: each
    profile's newest sample now, for a new episode's start). A reading without a live factor changes
    nothing; one after a reading without leaves the old episode for a new one."""
    if slowed.live <= 1.0:
        return episode
    if episode is None or starts(episode, previous, slowed):
        return Episode(at, at, slowed, dict(newest))
    return replace(episode, seen=at, slowed=slowed)


def starts(episode: Episode | None, previous: Slowdown | None, slowed: Slowdown) -> bool:
    """Whether the reading `slowed` begins a new episode: slowed, with none before it or after a reading
    that was not (what `next_episode` needs each profile's newest sample for)."""
    return slowed.live > 1.0 and (episode is None or previous is None or previous.live <= 1.0)
