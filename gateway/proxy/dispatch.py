"""Dispatch: send one routed request upstream, fail over before the first byte, pass the answer through,
cancel upstream work when the client goes away, and emit one `RequestRecord` when the request ends.

- Candidates are tried in the router's order, at most `max_attempts` of them. A connect error, a timeout
  or a 5xx before the first byte moves on to the next; a 4xx is the client's problem and is passed
  through as it is. When every candidate failed, the last 5xx is passed through (or 502/504 if none
  answered at all).
- In-flight is counted per backend from the moment of dispatch until the last byte (pitfall 4).
- A watcher waits on `receive()` for `http.disconnect` and cancels the request's task: the upstream
  response is closed at once, streaming or not, and the engine sees the connection drop.
- `RequestRecord` is the single completion path: observers (Prometheus, live stats, a router's
  `observe`) are called with it, so new recorders attach without touching this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.api.asgi import Receive, Send, send_bytes
from gateway.api.errors import error_body, error_frame
from gateway.backends.registry import Registry, Status
from gateway.proxy.admission import Refused, Slot
from gateway.proxy.breaker import Outcome, Ticket, outcome_of
from gateway.proxy.reliability import ERROR_SOURCE, Reliability, refusal_headers
from gateway.proxy.stream import SseMeter
from gateway.proxy.upstream import (
    UpstreamConnectError,
    UpstreamError,
    UpstreamRefused,
    UpstreamResponse,
    UpstreamTimeout,
    UpstreamTransport,
)
from gateway.records import RequestRecord
from gateway.settings import PoolConfig
from gateway.stats.live import DeviceTime

log = logging.getLogger("gateway.dispatch")

_NO_BACKEND_LEFT = "no_backend_left"
# A backend that reset the connection before answering is tried again after this pause: long enough for a
# crash to show as a refused connection or a restart to reach the prober, short against a queue deadline.
_RESET_RETRY_S = 0.25
CLIENT_CLOSED = 499  # nginx's convention for "the client went away before the answer"
OVERHEAD_MS = b"x-gateway-overhead-ms"  # the gateway's own time: parse, route, rewrite (no queueing)
QUEUE_MS = b"x-gateway-queue-ms"  # time waiting for an admission slot (a full pool, a warm-up)


@dataclass(slots=True)
class Job:
    """One request as ingress hands it over: parsed once, raw bytes kept for forwarding."""

    request_id: str
    endpoint: str  # "chat" | "completions"
    path: str  # upstream path, e.g. /v1/chat/completions
    pool: PoolConfig
    body: dict[str, Any]
    raw: bytes
    started: float  # perf_counter at arrival
    profile: str
    ranked: Sequence[str]
    stream: bool = False
    add_usage: bool = False  # the gateway asks for usage the client did not ask for (and strips it)
    _bodies: dict[str, bytes] = field(default_factory=dict)

    def body_for(self, backend: str) -> bytes:
        """The bytes to send: the client's own, unless the model name or stream_options must change."""
        served = self.pool.served_name(backend)
        if served == self.body.get("model") and not self.add_usage:
            return self.raw
        if served not in self._bodies:
            body = dict(self.body, model=served)
            if self.add_usage:
                options = self.body.get("stream_options")
                body["stream_options"] = {
                    **(options if isinstance(options, dict) else {}),
                    "include_usage": True,
                }
            self._bodies[served] = orjson.dumps(body)
        return self._bodies[served]


Observer = Callable[[RequestRecord], None]


class _Failed(Exception):
    """An attempt failed before the first byte; the next candidate may be tried."""

    def __init__(self, why: str, status: int, answer: tuple[bytes, str] | None = None) -> None:
        super().__init__(why)
        self.status = status
        self.answer = answer  # a 5xx body and content type, passed through if it is the last one
        self.outcome: Outcome = "failure"  # for the breaker: a busy 503 or a 429 is back-pressure
        # No proof of death (a reset before the answer, an open breaker): it may serve again soon.
        self.may_recover = False


class Dispatcher:
    def __init__(
        self,
        registry: Registry,
        transport: UpstreamTransport,
        max_attempts: int,
        observers: Sequence[Observer] = (),
        reliability: Reliability | None = None,
    ) -> None:
        self.registry = registry
        self.transport = transport
        self.max_attempts = max_attempts
        self.device_time = DeviceTime()
        self.observers = list(observers)
        self.reliability = reliability  # breakers and admission slots; None: neither is enforced

    async def run(self, job: Job, receive: Receive, send: Send) -> RequestRecord:
        record = RequestRecord(
            job.request_id, job.pool.model, job.endpoint, job.profile, job.stream, body=job.body
        )
        task = asyncio.current_task()
        assert task is not None
        gone = asyncio.Event()
        finished: list[bool] = []  # set just before the last send: a disconnect after it is not a cancel
        watcher = asyncio.create_task(_watch_disconnect(receive, task, gone, finished))
        try:
            await self._attempts(job, record, send, finished)
        except asyncio.CancelledError:
            if not gone.is_set():
                raise
            task.uncancel()
            record.status, record.error = CLIENT_CLOSED, "client disconnected"
        finally:
            watcher.cancel()
            record.e2e = time.perf_counter() - job.started
            self._finish(record)
        return record

    async def _attempts(self, job: Job, record: RequestRecord, send: Send, finished: list[bool]) -> None:
        last: _Failed | None = None
        tried: list[str] = []
        may_recover: set[str] = set()  # candidates whose latest failure here proves no death
        while True:  # bounded by max_attempts and, when waiting for a comeback, the queue deadline
            queued_at = time.perf_counter()
            slot = await self._slot(job, tried, may_recover)
            record.queue_wait += time.perf_counter() - queued_at
            if isinstance(slot, Refused):
                if last is None or slot.code != _NO_BACKEND_LEFT:
                    await self._refuse(job, record, send, finished, slot)
                    return
                break  # no other backend can take it: answer with the last failure
            backend = slot.backend if isinstance(slot, Slot) else slot
            tried.append(backend)
            record.backend, record.attempts = backend, record.attempts + 1
            try:
                await self._attempt(job, backend, record, send, finished)
                return
            except _Failed as failed:
                record.failures.append((backend, str(failed)))
                log.warning(
                    "request %s: %s failed before the first byte: %s", job.request_id, backend, failed
                )
                last = failed
                if failed.may_recover:
                    may_recover.add(backend)
                else:
                    may_recover.discard(backend)
            finally:
                if isinstance(slot, Slot):
                    slot.release()
        assert last is not None, "dispatch needs at least one candidate"
        record.status, record.error = last.status, "; ".join(f"{b}: {why}" for b, why in record.failures)
        finished.append(True)
        content_type = last.answer[1] if last.answer is not None else "application/json"
        headers = self._headers(job, record, content_type)
        if last.status in (429, 503):
            headers.append((b"retry-after", b"1"))  # busy or failing everywhere: worth retrying soon
        if last.answer is not None:
            await send_bytes(send, last.status, last.answer[0], headers)
        else:
            body = error_body(last.status, f"no backend answered: {record.error}", "upstream_unavailable")
            await send_bytes(send, last.status, body, headers)

    async def _slot(self, job: Job, tried: list[str], may_recover: set[str]) -> Slot | Refused | str:
        """Where the next attempt goes: an admission slot (waiting in the pool's queue when every
        acceptable backend is full or still warming up), or without admission the next ranked name."""
        remaining = [b for b in job.ranked if b not in tried]
        spent = not remaining or len(tried) >= self.max_attempts
        if self.reliability is not None and spent:
            return await self._comeback(job, self.reliability, may_recover)
        if spent:
            return _no_backend_left()
        if self.reliability is None:
            return remaining[0]
        if not tried:
            return await self._first_slot(job, remaining, self.reliability)
        # Fail over to a backend that serves now; when none does, wait (bounded) for one to come back.
        ready = [b for b in remaining if self.registry.backends[b].status is Status.READY]
        left = _queue_time_left(job, self.reliability)
        got = await self.reliability.admission.acquire(job.pool.model, ready or remaining, left)
        return _warming_if_so(job, ready or remaining, self.reliability, got)

    @staticmethod
    async def _first_slot(job: Job, ranked: list[str], reliability: Reliability) -> Slot | Refused:
        """The first attempt's slot. When every candidate is warming up, the request waits
        `warming_wait_s` for the first to be ready, and a wait that ends with all of them still warming
        is answered 503 `backends_warming` with their expected time left, never as a lack of room."""
        warming = reliability.warmups.all_warming(ranked)
        wait = reliability.warming_wait_s if warming else None
        got = await reliability.admission.acquire(job.pool.model, ranked, wait)
        return _warming_if_so(job, ranked, reliability, got)

    async def _comeback(self, job: Job, reliability: Reliability, may_recover: set[str]) -> Slot | Refused:
        """Every candidate failed (or the attempts are spent): wait, within the request's queue deadline
        (counted from its arrival), for a candidate that may serve again, and go there. A backend that is
        down but may come back (warming up, restarting) is taken as soon as it is ready; one that reset
        the connection before answering (it may be restarting, unseen yet) after a short pause; one
        whose breaker is open once its cool-down lets a probe through. Nothing to wait for: the last
        failure is the answer. The deadline passes: 503 `queue_timeout`, as for any queued request."""
        while True:
            left = _queue_time_left(job, reliability)
            restarting = [b for b in job.ranked if self.registry.may_come_back(b)]
            alive = [b for b in job.ranked if b in may_recover and self._is_ready(b)]
            if left <= 0:
                if not restarting and not alive:
                    return _no_backend_left()
                return reliability.warming_refusal(job.pool.model, job.ranked) or _queue_timeout(reliability)
            soon = [t for t in (self._retry_in(b, reliability) for b in alive) if t < left]
            if not restarting and not soon:
                return _no_backend_left()
            pause = min(soon, default=left)
            if restarting:
                got = await reliability.admission.acquire(job.pool.model, restarting, pause)
                if isinstance(got, Slot) or got.code != "queue_timeout":
                    return got
            else:
                await asyncio.sleep(pause)
            open_now = [b for b in alive if self._is_ready(b) and not reliability.breaker_open(b)]
            slot = reliability.admission.try_acquire(open_now)
            if slot is not None:
                return slot

    def _is_ready(self, backend: str) -> bool:
        return self.registry.backends[backend].status is Status.READY

    @staticmethod
    def _retry_in(backend: str, reliability: Reliability) -> float:
        """How long before a ready backend that failed without proof of death is worth another try."""
        if backend in reliability.breakers and reliability.breaker_open(backend):
            cooldown = reliability.breakers[backend].snapshot().retry_in_seconds
            return cooldown if cooldown > 0 else _RESET_RETRY_S  # half-open, its probe taken
        return _RESET_RETRY_S

    async def _refuse(
        self, job: Job, record: RequestRecord, send: Send, finished: list[bool], refused: Refused
    ) -> None:
        record.status, record.error = refused.status, refused.code
        finished.append(True)
        body = error_body(refused.status, refused.message, refused.code)
        headers = [(b"content-type", b"application/json"), *refusal_headers(refused)]
        headers.append((b"x-gateway-profile", job.profile.encode()))
        headers.append((QUEUE_MS, _ms(record.queue_wait)))
        await send_bytes(send, refused.status, body, headers)

    def _ticket(self, backend: str) -> Ticket | None:
        """The breaker's permission; _Failed when it is open (or its half-open probe is taken)."""
        if self.reliability is None or backend not in self.reliability.breakers:
            return None
        ticket = self.reliability.breakers[backend].allow()
        if ticket is None:
            failed = _Failed("circuit breaker open", 503)
            failed.may_recover = True  # its cool-down ends, then a probe goes through
            raise failed
        return ticket

    async def _attempt(
        self, job: Job, backend: str, record: RequestRecord, send: Send, finished: list[bool]
    ) -> None:
        ticket = self._ticket(backend)
        outcome: Outcome = "failure"
        try:
            outcome = await self._exchange(job, backend, record, send, finished)
        except asyncio.CancelledError:
            outcome = "client_error"  # the client went away: says nothing about the backend
            raise
        except _Failed as failed:
            outcome = failed.outcome
            cause = failed.__cause__
            if isinstance(cause, UpstreamRefused):
                self.registry.note_down(backend, str(failed))  # nothing listens: it is down, now
            elif isinstance(cause, UpstreamConnectError):
                failed.may_recover = True  # reset before the answer: it may be restarting, no proof
            raise
        finally:
            if ticket is not None and self.reliability is not None:
                self.reliability.breakers[backend].record(ticket, outcome)
        if outcome == "success":
            self.registry.note_success(backend)  # passive health: it answers, so it is alive

    async def _exchange(
        self, job: Job, backend: str, record: RequestRecord, send: Send, finished: list[bool]
    ) -> Outcome:
        state = self.registry.backends[backend]
        headers = {"content-type": "application/json"}
        if state.config.api_key:
            headers["authorization"] = f"Bearer {state.config.api_key}"
        body = job.body_for(backend)
        self.registry.acquire(backend)
        self.device_time.change(backend, state.config.device, +1)
        shared_at_dispatch = self.device_time.shared_seconds(backend)
        record.inflight_at_dispatch = state.inflight
        record.device_inflight_at_dispatch = _device_load(self.registry, backend)
        if record.attempts == 1:
            record.overhead = time.perf_counter() - job.started - record.queue_wait
        response: UpstreamResponse | None = None
        try:
            try:
                response = await self.transport.send(state.config.url + job.path, headers, body)
            except UpstreamError as exc:
                raise _Failed(str(exc), 504 if isinstance(exc, UpstreamTimeout) else 502) from exc
            if response.status >= 500 or response.status == 429:
                # 5xx: the engine broke; 429 or a busy 503: back-pressure. Either way another may serve.
                answer = await _read_quietly(response)
                text = answer[0].decode("utf-8", "replace") if answer else None
                failed = _Failed(f"HTTP {response.status}", response.status, answer)
                failed.outcome = outcome_of(response.status, text)
                raise failed
            record.status = response.status
            if job.stream and response.status == 200 and "event-stream" in response.content_type:
                await self._stream(job, record, response, send, finished)
            else:
                await self._whole(job, record, response, send, finished)
            broke = response.status < 300 and record.error is not None  # mid-stream failure
            return "failure" if broke else outcome_of(response.status, None)
        finally:
            if response is not None:
                response.close()
            record.device_shared_s = self.device_time.shared_seconds(backend) - shared_at_dispatch
            self.device_time.change(backend, state.config.device, -1)
            self.registry.release(backend)

    async def _whole(
        self, job: Job, record: RequestRecord, response: UpstreamResponse, send: Send, finished: list[bool]
    ) -> None:
        try:
            payload = await response.read()
        except UpstreamError as exc:
            raise _Failed(str(exc), 504 if isinstance(exc, UpstreamTimeout) else 502) from exc
        if response.status == 200:
            _take_usage(record, payload)
        else:
            record.error = f"HTTP {response.status}"
        finished.append(True)
        await send_bytes(send, response.status, payload, self._headers(job, record, response.content_type))

    async def _stream(
        self, job: Job, record: RequestRecord, response: UpstreamResponse, send: Send, finished: list[bool]
    ) -> None:
        headers = self._headers(job, record, response.content_type)
        headers.append((b"cache-control", b"no-cache"))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        meter = SseMeter(strip_usage=job.add_usage)
        tail = b""
        try:
            # The first-token timeout runs until content arrives (a role frame is not a token).
            async for chunk in response.iter_chunks(lambda: meter.first_token_at is not None):
                out = meter.feed(chunk)
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
            tail = meter.flush()
        except UpstreamError as exc:
            # The status is already 200: the client learns of the failure from an error frame.
            record.error = str(exc)
            frame = error_frame(f"the backend failed mid-stream: {exc}", "upstream_stream_error")
            tail = frame + b"data: [DONE]\n\n"
        _take_stream_measures(record, meter, job.started)
        finished.append(True)
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    def _headers(self, job: Job, record: RequestRecord, content_type: str) -> list[tuple[bytes, bytes]]:
        headers = [
            (b"content-type", content_type.encode("latin-1")),
            (b"x-gateway-backend", (record.backend or "").encode()),
            (b"x-gateway-profile", job.profile.encode()),
            (OVERHEAD_MS, _ms(record.overhead)),
            (QUEUE_MS, _ms(record.queue_wait)),
        ]
        if record.status >= 500:
            headers.append((ERROR_SOURCE, b"upstream"))  # a backend failed or answered it, not the gateway
        return headers

    def _finish(self, record: RequestRecord) -> None:
        for observer in self.observers:
            try:
                observer(record)
            except Exception:  # a broken recorder must not break the request path
                log.exception("request observer %r failed", observer)


def _ms(seconds: float) -> bytes:
    return f"{seconds * 1000:.3f}".encode()


def _warming_if_so(
    job: Job, waited_for: list[str], reliability: Reliability, got: Slot | Refused
) -> Slot | Refused:
    """A wait that ran out while every backend waited for is still warming up is a warm-up, not a lack
    of room: 503 `backends_warming` with the time left instead of `queue_timeout`."""
    if isinstance(got, Refused) and got.code == "queue_timeout":
        return reliability.warming_refusal(job.pool.model, waited_for) or got
    return got


def _no_backend_left() -> Refused:
    return Refused(502, _NO_BACKEND_LEFT, "no other backend can take this request", 1)


def _queue_timeout(reliability: Reliability) -> Refused:
    config = reliability.admission.config
    message = f"no backend came back within the queue deadline of {config.queue_timeout_seconds:g}s"
    return Refused(503, "queue_timeout", message, config.retry_after_seconds)


def _queue_time_left(job: Job, reliability: Reliability) -> float:
    """What is left of the request's queue deadline, counted from its arrival."""
    timeout = reliability.admission.config.queue_timeout_seconds
    return timeout - (time.perf_counter() - job.started)


def _device_load(registry: Registry, backend: str) -> int:
    state = registry.backends[backend]
    device = state.config.device
    if device is None:
        return state.inflight
    return sum(s.inflight for s in registry.backends.values() if s.config.device == device)


async def _watch_disconnect(
    receive: Receive, task: asyncio.Task[Any], gone: asyncio.Event, finished: list[bool]
) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            # The server also reports disconnect once the response is complete; only earlier is a cancel.
            if not finished:
                gone.set()
                task.cancel()
            return


async def _read_quietly(response: UpstreamResponse) -> tuple[bytes, str] | None:
    with contextlib.suppress(UpstreamError):
        return await response.read(), response.content_type
    return None


def _take_usage(record: RequestRecord, payload: bytes) -> None:
    try:
        usage = orjson.loads(payload).get("usage")
    except (orjson.JSONDecodeError, AttributeError):
        return
    if isinstance(usage, dict):
        record.output_tokens = usage.get("completion_tokens")
        record.prompt_tokens = usage.get("prompt_tokens")


def _take_stream_measures(record: RequestRecord, meter: SseMeter, started: float) -> None:
    end = time.perf_counter()
    if meter.error is not None and record.error is None:
        record.error = str(meter.error.get("message", "upstream error frame"))
    if meter.usage is not None:
        record.output_tokens = meter.usage.get("completion_tokens")
        record.prompt_tokens = meter.usage.get("prompt_tokens")
    elif meter.content_frames:
        record.output_tokens = meter.content_frames  # a lower bound when the engine sends no usage
    if meter.first_token_at is not None:
        record.ttft = meter.first_token_at - started
        record.itl = meter.itl
        tokens = record.output_tokens or 0
        if tokens > 1:
            # TPOT is the decode time per token after the first; never TTFT divided by tokens.
            record.tpot = (end - meter.first_token_at) / (tokens - 1)
