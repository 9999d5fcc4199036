"""When decode probes stand for exploring a backend with a client's request, and when what they measure
counts as the cell's measurement (explore/plan.py plans them; proxy/decode_probe.py sends them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from gateway.routing.model.cells import CellView, repetitive
from gateway.routing.model.harm import DeviceLoad
from gateway.routing.model.shared_device import contended
from gateway.routing.pipeline.context import RouteContext


def probe_instead(
    ctx: RouteContext,
    cells: Mapping[str, CellView],
    device: Mapping[str, Sequence[DeviceLoad]],
    name: str,
    slower: Callable[[], bool | None],
) -> bool:
    """Whether decode probes stand for exploring backend `name` with this request: the cell is short of
    min_samples, the content is novel (what a probe's is), the request would slow busy requests of its
    device's other engines for its whole life, and either the profile ranks by decode speed, which the
    cell borrows from the engine's all-profile fit while short of samples (model_choice.ModelChoice.choose;
    probes feed that fit), or the cell holds no answer yet and its engine is not known to decode as fast
    as the winner (`slower()`: whether it decodes slower beyond the tolerance, peers.decodes_slower; None:
    not known; asked last, it reads two engines' models). A ttft or e2e cell borrows no decode speed, but
    its first request on an engine that decodes slower is not worth the device: five whole requests each
    of bf16 and fp8 beside fifteen on nvfp4-mtp (trio-one-spark, one Spark) ran longer than the oracle's
    whole 16-user phase. One that held answers is refreshed by a request, what its answers measured:
    probed instead, spark-duo-flaky's fp8-base no longer took its four refreshes of the mixed burst off
    the failing fp8-mtp, and the phase ran 120.8 -> 134.5 s. Whether the probes count as the cell's
    measurement is `probe_measures`."""
    cell = cells[name]
    if repetitive(ctx.features.repetition) or cell.model.samples >= ctx.adaptive.min_samples:
        return False
    if contended(name, device[name]) <= 0:
        return False
    if ctx.profile.objective == "tokens_per_second":
        return True
    return cell.count == 0 and slower() is not False


def probe_measures(objective: str, slower: bool | None) -> bool:
    """Whether the probes planned for a cell of a profile with this objective count as its measurement (its
    exploration booked, its age restarted; ExplorationPlan.measures_cell): for `tokens_per_second` always,
    the cell borrows what they measure; for ttft or e2e only once its engine is known to decode slower than
    the winner (`slower`, as in `probe_instead`), which is what puts its requests off. Probes sent while that
    is not known leave the cell due, so an engine they show as fast is measured by a request of its own:
    counted as measurements, plain on a one-Spark pair beside a rejected-MTP engine stayed unmeasured for
    the whole replay while that engine was predicted at 372 s a request."""
    return objective == "tokens_per_second" or slower is True
