"""Slow-down episodes (routing/slowdown/episodes.py): how long an engine stays suspect after its live reading
lapses, which cells were measured mostly before it slowed, and how one reading follows another."""

from __future__ import annotations

from gateway.policy.schema import Adaptive
from gateway.records import Sample
from gateway.routing.model.cells import ModelCache
from gateway.routing.slowdown.episodes import Episode, next_episode
from gateway.routing.slowdown.memory import EngineSlowdowns
from gateway.routing.slowdown.reading import Slowdown
from gateway.stats.live import LiveRecorder

SLOWED = Slowdown(live=2.5, evidence=6, slow=6)


def answers(n: int) -> list[Sample]:
    """`n` answers alike in every field: only which object is which tells them apart."""
    return [Sample(e2e=2.0, ttft=0.2, output_tokens=100, prompt_tokens=500, concurrency=1) for _ in range(n)]


def test_an_episode_is_recent_within_the_bound_and_only_while_slowed_beyond_the_tolerance() -> None:
    episode = Episode(started=100.0, seen=100.0, slowed=SLOWED, newest={})
    assert episode.recent(160.0, within_s=60.0, tolerance=0.25)
    assert not episode.recent(160.5, within_s=60.0, tolerance=0.25)
    mild = Episode(started=100.0, seen=100.0, slowed=Slowdown(live=1.2), newest={})
    assert not mild.recent(100.0, within_s=60.0, tolerance=0.25)


def test_a_cell_predates_the_episode_when_most_of_its_samples_are_from_before_it() -> None:
    samples = answers(5)
    assert Episode(0.0, 0.0, SLOWED, {"chat": samples[2]}).predates("chat", samples)  # 3 of 5 before
    # 2 of 5 before: the mark is that very sample, not the newest one equal to it.
    assert not Episode(0.0, 0.0, SLOWED, {"chat": samples[1]}).predates("chat", samples)
    assert not Episode(0.0, 0.0, SLOWED, {"chat": samples[2]}).predates("chat", [*samples, *answers(2)])


def test_a_profile_unknown_when_the_episode_began_is_not_presumed_stale() -> None:
    samples = answers(5)
    episode = Episode(0.0, 0.0, SLOWED, {"chat": None, "code": samples[-1]})
    assert not episode.predates("chat", samples)
    assert not episode.predates("edit", samples)
    assert episode.predates("code", samples)


def test_a_reading_without_a_live_factor_changes_nothing() -> None:
    episode = Episode(10.0, 20.0, SLOWED, {})
    assert next_episode(episode, SLOWED, Slowdown(live=1.0, shift=3.0), 30.0, {}) is episode
    assert next_episode(None, None, Slowdown(), 30.0, {}) is None


def test_the_first_slowed_reading_and_one_after_a_healthy_reading_start_an_episode() -> None:
    mark = answers(1)[0]
    first = next_episode(None, None, SLOWED, 10.0, {"chat": mark})
    assert first == Episode(10.0, 10.0, SLOWED, {"chat": mark})
    again = next_episode(first, Slowdown(live=1.0), SLOWED, 50.0, {"chat": None})
    assert again == Episode(50.0, 50.0, SLOWED, {"chat": None})


def test_a_slowed_reading_after_a_slowed_one_extends_the_episode() -> None:
    mark = answers(1)[0]
    episode = Episode(10.0, 10.0, SLOWED, {"chat": mark})
    slower = Slowdown(live=3.0, evidence=8, slow=8)
    extended = next_episode(episode, SLOWED, slower, 40.0, {"chat": None})
    assert extended is not None
    assert (extended.started, extended.seen, extended.slowed) == (10.0, 40.0, slower)
    assert extended.newest == {"chat": mark}


def test_the_all_profile_model_is_remembered_slowed_while_most_of_its_samples_predate_the_episode() -> None:
    windows = LiveRecorder(clock=lambda: 1_000.0)
    before = answers(6)
    for i, sample in enumerate(before):  # two profiles: the all-profile model takes them together
        windows.record("x", "chat" if i % 2 else "code", sample, now=900.0 + i)
    slowdowns = EngineSlowdowns(windows, ModelCache(), None)
    slowdowns.adopt("x", 910.0, SLOWED)  # the episode begins
    slowdowns.adopt("x", 920.0, Slowdown())  # the live reading lapses: the fits took it in
    assert slowdowns.remembered("x", None, 930.0, tolerance=0.25) == SLOWED.live
    # Seen 80 s ago, beyond any refresh bound of the test: time passing does not undo a throttle.
    assert slowdowns.remembered("x", None, 990.0, tolerance=0.25) == SLOWED.live
    # Not beyond the tolerance: nothing to remember.
    assert slowdowns.remembered("x", None, 930.0, tolerance=2.0) == 1.0
    # Answers since, of either profile: still remembered while they are fewer than those before...
    for i, sample in enumerate(answers(5)):
        windows.record("x", "edit" if i % 2 else "chat", sample, now=921.0 + i)
    assert slowdowns.remembered("x", None, 930.0, tolerance=0.25) == SLOWED.live
    # ...and no more once half its samples are from since.
    windows.record("x", "code", answers(1)[0], now=926.0)
    assert slowdowns.remembered("x", None, 930.0, tolerance=0.25) == 1.0


def test_an_engine_stays_suspect_while_the_windows_may_hold_answers_of_before_its_slow_down() -> None:
    now = [1_000.0]
    windows = LiveRecorder(clock=lambda: now[0], max_age_s=600.0)
    slowdowns = EngineSlowdowns(windows, ModelCache(), None)
    slowdowns.adopt("x", 1_000.0, SLOWED)
    slowdowns.adopt("x", 1_010.0, Slowdown())  # the live reading lapses
    now[0] = 1_300.0  # beyond a refresh bound of 120 s, within the windows' 600 s
    assert slowdowns.suspect("x", Adaptive(refresh_s=120.0)) == SLOWED
    now[0] = 1_601.0  # beyond both
    assert slowdowns.suspect("x", Adaptive(refresh_s=120.0)) is None
    assert slowdowns.suspect("x", Adaptive(refresh_s=900.0)) == SLOWED  # a longer bound of the policy's
