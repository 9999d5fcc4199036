"""A hung engine (SIGSTOP: its process stops, the kernel still accepts connections to it), one of two twin
engines running as processes of their own, under steady load: a static policy prefers it, so without
hang detection every new request would keep going there, and those waiting there for their first byte
would wait until the first-token timeout (600 s by default).

What must hold: within a few seconds the gateway sees it silent for far longer than it usually is and
calls it stalled; new arrivals go to the other engine; requests parked on it before any content fail
over and complete there; streams that already had content from it end with an error frame at once,
not at the idle timeout; no request waits past the bound; once it runs again (SIGCONT) it is back at
once. The prober keeps its production settings (5 s interval and timeout, three timeouts in a row to
call a serving backend dead), so it is the hang watch that acts. Every wait is bounded; the engine
processes are always continued and killed."""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from fault_rig import MODEL
from loopback import serve_asgi
from test_engine_death import EngineProc, engine_process

from gateway.app import Gateway, build_app, build_gateway
from gateway.backends.registry import Status
from gateway.records import RequestRecord
from gateway.settings import Settings

POLICY = """
version: 1
routing: static
profiles:
  - name: default
    prefer: [a, b]
"""


@dataclass(frozen=True)
class Load:
    stop_s: float  # how long engine "a" stays stopped
    rps: float  # new requests per second (alternately streamed and whole)
    streams: int  # clients streaming back to back all along
    bound_s: float  # no request may take longer
    stream_tokens: int = 200
    streamed_arrivals: bool = True  # every other new request streamed; False: all whole (non-streamed)
    arrival_tokens: int = 32
    warm_s: float = 3.0  # load before the stop
    after_s: float = 6.0  # load after the continue
    wedge: bool = False  # wedge engine "a" (SIGUSR1: HTTP, /health and /metrics answer) instead of SIGSTOP
    history_chars: int = (
        0  # the streams' prompts until 3 s before the stop, in characters (slow first tokens)
    )


@dataclass
class Sent:
    tag: str
    stream: bool
    started: float
    ended: float = 0.0
    status: int = 0
    backend: str = ""
    raw: bytes = b""

    @property
    def ok(self) -> bool:
        if self.status != 200:
            return False
        if not self.stream:
            return True
        return self.raw.rstrip().endswith(b"data: [DONE]") and b'"error"' not in self.raw

    def error_code(self) -> str | None:
        for frame in self.raw.split(b"\n\n"):
            if frame.startswith(b'data: {"error"'):
                return str(orjson.loads(frame[6:])["error"]["code"])
        return None


@dataclass
class Run:
    load: Load
    sent: list[Sent] = field(default_factory=list)
    records: dict[str, RequestRecord] = field(default_factory=dict)
    stopped_at: float = 0.0
    history_until: float = 0.0  # streams send long prompts until then
    continued_at: float = 0.0
    stalled_at: float | None = None  # when the gateway first called "a" stalled
    back_at: float | None = None  # when it was no longer stalled after the continue
    listed_stalled: bool = False  # /gateway/backends said so during the stop
    metrics: str = ""

    def first_backend(self, sent: Sent) -> str | None:
        record = self.records.get(sent.tag)
        if record is None:
            return None
        return record.failures[0][0] if record.failures else record.backend


@contextmanager
def continued_at_the_end(engine: EngineProc) -> Iterator[None]:
    try:
        yield
    finally:
        if engine.process.poll() is None:
            engine.process.send_signal(signal.SIGCONT)  # a stopped process cannot even be killed cleanly


async def _send(
    session: aiohttp.ClientSession, url: str, sent: Sent, max_tokens: int, prompt: str = "tell me a story"
) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": sent.stream,
        "user": sent.tag,  # ties the client's view to the gateway's record
    }
    try:
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            sent.status, sent.backend = response.status, response.headers.get("x-gateway-backend", "")
            async for chunk in response.content.iter_any():
                sent.raw += chunk
    except (aiohttp.ClientError, TimeoutError) as exc:
        sent.raw += repr(exc).encode()
    finally:
        sent.ended = time.monotonic()


async def _streamer(session: aiohttp.ClientSession, url: str, run: Run, n: int, until: asyncio.Event) -> None:
    for i in itertools.count():
        if until.is_set():
            return
        sent = Sent(f"s{n}-{i}", True, time.monotonic())
        run.sent.append(sent)
        history = run.load.history_chars and time.monotonic() < run.history_until
        prompt = _long_prompt(run.load.history_chars) if history else "tell me a story"
        await _send(session, url, sent, run.load.stream_tokens, prompt)


def _long_prompt(chars: int) -> str:
    words = itertools.cycle(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"])
    return " ".join(itertools.islice(words, chars // 6))


async def _watch(gateway: Gateway, session: aiohttp.ClientSession, url: str, run: Run) -> None:
    state = gateway.registry.backends["a"]
    while True:
        now = time.monotonic()
        if run.stopped_at and run.stalled_at is None and state.stalled_since is not None:
            run.stalled_at = now
            async with session.get(url + "/gateway/backends") as response:
                listed = orjson.loads(await response.read())["backends"]
            run.listed_stalled = any(b["name"] == "a" and b["stalled"] for b in listed)
        if run.continued_at and run.back_at is None and state.stalled_since is None:
            run.back_at = now
        await asyncio.sleep(0.05)


async def hang_run(tmp_path: Path, load: Load) -> Run:
    run = Run(load)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    async with (
        asyncio.timeout(load.warm_s + load.stop_s + load.after_s + load.bound_s + 40),
        engine_process(tmp_path, "a", 0, 64) as a,
        engine_process(tmp_path, "b", 1, 64) as b,
    ):
        with continued_at_the_end(a):
            settings = Settings(
                backends=[{"name": e.name, "url": e.url, "flavor": "vllm"} for e in (a, b)],
                pools=[{"model": MODEL, "backends": ["a", "b"]}],
                policy=policy,
                timeouts={"connect_s": 2.0},  # first token 600 s and idle gap 120 s: the defaults
            )
            gateway = build_gateway(settings, observers=[lambda r: run.records.update({r.body["user"]: r})])
            async with (
                serve_asgi(build_app(gateway)) as (url, _),
                # A connection per request: a pooled one the server closes as idle (uvicorn's keep-alive
                # timeout) just as it is reused fails in the client, before the gateway sees anything.
                aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=load.bound_s + 30),
                    connector=aiohttp.TCPConnector(force_close=True),
                ) as session,
            ):
                while any(s.status is not Status.READY for s in gateway.registry.backends.values()):
                    await asyncio.sleep(0.05)
                await _drive(gateway, session, url, run, a)
                async with session.get(url + "/metrics") as response:
                    run.metrics = await response.text()
    return run


async def _drive(gateway: Gateway, session: aiohttp.ClientSession, url: str, run: Run, a: EngineProc) -> None:
    load = run.load
    until = asyncio.Event()
    run.history_until = time.monotonic() + load.warm_s - 3.0
    tasks = [asyncio.create_task(_streamer(session, url, run, n, until)) for n in range(load.streams)]
    watcher = asyncio.create_task(_watch(gateway, session, url, run))
    started = time.monotonic()
    stop_at, cont_at = started + load.warm_s, started + load.warm_s + load.stop_s
    end_at = cont_at + load.after_s
    try:
        for i in itertools.count():
            now = time.monotonic()
            if not run.stopped_at and now >= stop_at:
                a.process.send_signal(signal.SIGUSR1 if load.wedge else signal.SIGSTOP)
                run.stopped_at = time.monotonic()
            if run.stopped_at and not run.continued_at and now >= cont_at:
                a.process.send_signal(signal.SIGUSR2 if load.wedge else signal.SIGCONT)
                run.continued_at = time.monotonic()
            if now >= end_at:
                break
            sent = Sent(f"r{i}", load.streamed_arrivals and i % 2 == 0, now)
            run.sent.append(sent)
            tasks.append(asyncio.create_task(_send(session, url, sent, load.arrival_tokens)))
            await asyncio.sleep(1.0 / load.rps)
        until.set()
        await asyncio.gather(*tasks)
    finally:
        watcher.cancel()


def check(run: Run) -> dict[str, Any]:
    """The must-hold properties of one run; returns its figures."""
    load = run.load
    leave_by = run.stopped_at + 5.0
    arrivals = [s for s in run.sent if s.tag.startswith("r")]
    arrivals_late = [s for s in arrivals if leave_by <= s.started < run.continued_at]
    to_hung = [s.tag for s in arrivals_late if run.first_backend(s) == "a"]
    parked = [r for r in run.records.values() if r.failures and r.failures[0][0] == "a"]
    stalled_failovers = [r for r in parked if "stalled" in r.failures[0][1]]
    longest = max(s.ended - s.started for s in run.sent)
    cut_streams = [s for s in run.sent if s.error_code() == "backend_stalled"]
    figures = {
        "requests": len(run.sent),
        "stalled_after_s": None if run.stalled_at is None else round(run.stalled_at - run.stopped_at, 2),
        "late_arrivals": len(arrivals_late),
        "late_arrivals_to_hung": len(to_hung),
        "parked_failed_over": len(stalled_failovers),
        "cut_mid_stream": len(cut_streams),
        "longest_s": round(longest, 2),
        "back_after_continue_s": None if run.back_at is None else round(run.back_at - run.continued_at, 2),
    }
    print(f"\nhang run {load}: {figures}")
    assert run.stalled_at is not None and run.stalled_at - run.stopped_at < 5.0, figures
    assert run.listed_stalled, "/gateway/backends did not show it stalled"
    assert arrivals_late and not to_hung, figures
    assert stalled_failovers, figures
    for record in stalled_failovers:
        assert (record.status, record.backend, record.error) == (200, "b", None), record
    assert longest < load.bound_s, figures
    for sent in run.sent:
        # Served, or a stream that had content from the hung engine, ended at once with an error frame.
        assert sent.ok or (sent.stream and sent.backend == "a" and sent.error_code() == "backend_stalled"), (
            sent.tag,
            sent.status,
            sent.raw[-300:],
        )
    assert run.back_at is not None and run.back_at - run.continued_at < 6.0, figures  # a probe round
    served_again = [s for s in run.sent if s.started > run.back_at and s.backend == "a" and s.ok]
    assert served_again, ("the engine was not used again once it ran", figures)
    stall_lines = [line for line in run.metrics.splitlines() if line.startswith("gateway_backend_stall")]
    assert 'gateway_backend_stalls_total{backend="a"} 1.0' in stall_lines, stall_lines
    return figures


async def test_a_stopped_engine_is_left_within_seconds_and_its_parked_requests_fail_over(
    tmp_path: Path,
) -> None:
    check(await hang_run(tmp_path, Load(stop_s=20.0, rps=2.0, streams=5, bound_s=15.0)))


async def test_a_stopped_engine_with_only_whole_answers_in_flight_is_left_within_seconds(
    tmp_path: Path,
) -> None:
    """No stream to fall silent: the engine's health probe and /metrics scrape go unanswered while
    requests wait there, which a busy engine would still answer."""
    load = Load(stop_s=20.0, rps=3.0, streams=0, bound_s=15.0, streamed_arrivals=False, arrival_tokens=100)
    figures = check(await hang_run(tmp_path, load))
    assert figures["cut_mid_stream"] == 0


@pytest.mark.slow
async def test_an_80s_hang_under_4_rps_and_20_streams_leaves_no_request_hung_past_60s(
    tmp_path: Path,
) -> None:
    check(await hang_run(tmp_path, Load(stop_s=80.0, rps=4.0, streams=20, bound_s=60.0)))
