"""A wedged engine: its generation stops while its HTTP server, /health and /metrics still answer (a twin
engine process sent SIGUSR1), one of two engines, under steady load, preferred by a static policy.

Nothing at the transport level tells: connections open, health probes pass, scrapes answer. What must
hold: within 10 s the gateway finds it stalled from its own counters standing still (whole requests) or
its streams falling silent, whatever it has seen of that engine before (slow first tokens included);
the requests parked there fail over and complete on the other engine instead of waiting for the 600 s
first-token timeout; new requests go to the other engine (but for the rare request that re-checks it
once nothing is left there); once it runs again it serves again. Every wait is bounded; the engine
processes are always continued and killed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_engine_hang import Load, Run, hang_run

_STALLS = 'gateway_backend_stalls_total{backend="a"}'


def check_wedge(run: Run) -> dict[str, Any]:
    load = run.load
    found_by = run.stopped_at + 10.0
    arrivals = [s for s in run.sent if s.tag.startswith("r")]
    late = [s for s in arrivals if found_by <= s.started < run.continued_at]
    tried_wedged = [s.tag for s in late if run.first_backend(s) == "a"]
    parked = [r for r in run.records.values() if r.failures and r.failures[0][0] == "a"]
    moved = [r for r in parked if "stalled" in r.failures[0][1]]
    longest = max(s.ended - s.started for s in run.sent)
    figures = {
        "requests": len(run.sent),
        "stalled_after_s": None if run.stalled_at is None else round(run.stalled_at - run.stopped_at, 2),
        "late_arrivals": len(late),
        "late_arrivals_tried_on_wedged": len(tried_wedged),
        "parked_failed_over": len(moved),
        "longest_s": round(longest, 2),
        "back_after_run_again_s": None if run.back_at is None else round(run.back_at - run.continued_at, 2),
    }
    print(f"\nwedge run {load}: {figures}")
    assert run.stalled_at is not None and run.stalled_at - run.stopped_at < 10.0, figures
    assert run.listed_stalled, "/gateway/backends did not show it stalled"
    assert moved, figures
    for record in moved:
        assert (record.status, record.backend, record.error) == (200, "b", None), record
    # A stalled engine with nothing left is given one request now and then to tell whether it runs again.
    assert late and len(tried_wedged) <= 0.25 * len(late), figures
    assert longest < load.bound_s, figures
    for sent in run.sent:
        assert sent.ok or (sent.stream and sent.backend == "a" and sent.error_code() == "backend_stalled"), (
            sent.tag,
            sent.status,
            sent.raw[-300:],
        )
    served_again = [s for s in run.sent if s.started > run.continued_at and s.backend == "a" and s.ok]
    assert run.back_at is not None and served_again, ("the engine was not used again once it ran", figures)
    stalls = [line for line in run.metrics.splitlines() if line.startswith(_STALLS)]
    assert stalls and float(stalls[0].split()[-1]) >= 1, stalls
    return figures


async def test_a_wedged_engine_with_only_whole_requests_in_flight_is_left_within_seconds(
    tmp_path: Path,
) -> None:
    """No stream to fall silent and a control plane that answers: only the engine's counters tell."""
    load = Load(
        stop_s=20.0,
        rps=3.0,
        streams=0,
        bound_s=15.0,
        streamed_arrivals=False,
        arrival_tokens=100,
        wedge=True,
        after_s=25.0,
    )
    check_wedge(await hang_run(tmp_path, load))


async def test_a_wedged_engine_that_was_slow_to_first_tokens_before_is_left_as_fast(tmp_path: Path) -> None:
    """Streams with long prompts first (first tokens far slower than the floor), then the wedge: what it
    has seen of the engine does not widen the silence allowed to requests waiting there now."""
    load = Load(
        stop_s=20.0,
        rps=2.0,
        streams=3,
        bound_s=25.0,  # a long prompt parked there is prefilled again on the other engine
        wedge=True,
        history_chars=50_000,
        warm_s=12.0,
        after_s=25.0,
    )
    check_wedge(await hang_run(tmp_path, load))
