"""Every routing decision of a replay: which request of the trace, the profile, the backend chosen, and
the thread CPU time the decision took.

`TimedRouter` wraps whatever router a replay runs (a blind one, an oracle's, or the policy router the
gateway builds) and times each `route()` call with `time.thread_time_ns`: the CPU the deciding thread
spent, which a busy machine does not inflate the way it inflates wall time. On the virtual clock that CPU
costs no simulated time unless the bench charges it (`--charge-decision-cpu`): then the clock moves on by
the decision's CPU time, as a single-threaded gateway's loop would be held up by it on a real machine.

Each decision names its request by where the trace sent it (`phase.stream.index`), found from its prompt
text (every request's prompt is drawn from a seed of its own), so the decisions of two strategies on the
same trace can be lined up request by request (`diverging`) whatever order they were made in.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from gateway.api.openai import Router
from gateway.bench.virtual_time import VirtualTimeLoop
from gateway.records import BackendSnapshot, Decision
from gateway.stats.live import percentile

UNKNOWN = "?"  # a body the trace did not send (none expected: decode probes do not go through routing)


@dataclass(frozen=True)
class DecisionEntry:
    order: int  # the n-th decision of the replay
    request: str  # "phase.stream.index" in the trace, UNKNOWN when not found
    cls: str  # the request's class (the body's `user`)
    profile: str  # the decision's profile (the blind and oracle routers name the class)
    backend: str  # the backend tried first; "" when refused
    cpu_us: float  # thread CPU time of the decision, microseconds


def prompt_key(body: Mapping[str, Any]) -> str:
    """The text that tells the trace's requests apart: the prompt, or the last message's text."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return ""
    content = messages[-1].get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def request_ids(bodies: Mapping[tuple[int, int], Sequence[bytes]]) -> dict[str, str]:
    """Prompt text -> "phase.stream.index" for every body of the trace (routing_trace.stream_bodies)."""
    ids: dict[str, str] = {}
    for (phase, stream), raws in bodies.items():
        for index, raw in enumerate(raws):
            ids.setdefault(prompt_key(orjson.loads(raw)), f"{phase}.{stream}.{index}")
    return ids


class TimedRouter:
    """A router's decisions, each timed in thread CPU and logged; `charge`: the virtual clock moves on by
    each decision's CPU time."""

    def __init__(self, inner: Router, requests: Mapping[str, str], charge: bool = False) -> None:
        self.inner = inner
        self.requests = requests
        self.charge = charge
        self.entries: list[DecisionEntry] = []

    def route(self, endpoint: str, body: dict[str, Any], backends: Sequence[BackendSnapshot]) -> Decision:
        started = time.thread_time_ns()
        decision = self.inner.route(endpoint, body, backends)
        cpu_s = (time.thread_time_ns() - started) / 1e9
        if self.charge:
            loop = asyncio.get_running_loop()
            if isinstance(loop, VirtualTimeLoop):
                loop.advance(cpu_s)
        user = body.get("user")
        self.entries.append(
            DecisionEntry(
                order=len(self.entries),
                request=self.requests.get(prompt_key(body), UNKNOWN),
                cls=user if isinstance(user, str) else "",
                profile=decision.profile,
                backend=decision.ranked[0] if decision.ranked else "",
                cpu_us=round(cpu_s * 1e6, 1),
            )
        )
        return decision


@dataclass(frozen=True)
class DecisionCpu:
    """Thread CPU per decision over one replay, microseconds."""

    decisions: int
    p50_us: float
    p99_us: float

    @classmethod
    def of(cls, entries: Sequence[DecisionEntry]) -> DecisionCpu | None:
        cpu = [e.cpu_us for e in entries]
        p50, p99 = percentile(cpu, 50), percentile(cpu, 99)
        if p50 is None or p99 is None:
            return None
        return cls(len(cpu), round(p50, 1), round(p99, 1))


def write_log(path: Path, entries: Sequence[DecisionEntry]) -> None:
    """One JSON object per decision, in the order they were made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(asdict(e)) + b"\n" for e in entries))


def read_log(path: Path) -> list[DecisionEntry]:
    return [DecisionEntry(**orjson.loads(line)) for line in path.read_bytes().splitlines() if line.strip()]


@dataclass(frozen=True)
class Divergence:
    """Where two replays' decisions part: the requests both made that went to different backends."""

    common: int  # requests decided in both
    parted: list[tuple[DecisionEntry, DecisionEntry]]  # (a's, b's), in a's order
    only_a: int  # requests decided in one replay only (refused before routing, or failed to send)
    only_b: int


def diverging(a: Sequence[DecisionEntry], b: Sequence[DecisionEntry]) -> Divergence:
    """Line up two replays' decisions by request (not by order: timing differs between routers)."""
    by_request = {e.request: e for e in b if e.request != UNKNOWN}
    mine = {e.request for e in a if e.request != UNKNOWN}
    parted = [(e, by_request[e.request]) for e in a if e.request in by_request]
    common = len(parted)
    parted = [(x, y) for x, y in parted if x.backend != y.backend]
    return Divergence(common, parted, len(mine - set(by_request)), len(set(by_request) - mine))


def render_divergence(name_a: str, name_b: str, div: Divergence, limit: int = 40) -> str:
    """The count, then each parting (up to `limit`): request, class, and each side's profile and backend."""
    lines = [
        f"{name_a} vs {name_b}: {len(div.parted)} of {div.common} requests routed differently"
        + (f"; decided by one only: {div.only_a} / {div.only_b}" if div.only_a or div.only_b else "")
    ]
    rows = [
        ("#", "request", "class", f"{name_a} profile", f"{name_a} backend", f"{name_b} profile", "backend")
    ]
    rows += [
        (str(x.order), x.request, x.cls, x.profile, x.backend or "-", y.profile, y.backend or "-")
        for x, y in div.parted[:limit]
    ]
    if len(rows) > 1:
        rows[0] = (*rows[0][:-1], f"{name_b} backend")
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if len(div.parted) > limit:
        lines.append(f"  ... {len(div.parted) - limit} more")
    return "\n".join(lines)
