"""Dispatch: send one routed request upstream, fail over before the first byte, pass the answer through,
cancel upstream work when the client goes away, and emit one `RequestRecord` when the request ends.

The request's exchange with its client (proxy/exchange.py) travels through these pieces:

- proxy/attempts.py: which backend next (admission slots, failover, comeback waits, breakers). A
  connect error, a timeout or a 5xx before the first byte moves on to the next candidate; a 4xx is the
  client's problem and is passed through as it is. When every candidate failed, the last 5xx is passed
  through (or 502/504 if none answered at all).
  An engine's 5xx that may be the input's fault is judged by a second engine before any breaker hears
  of it (`_attempt`): the same failure there is the client's 400, no engine charged.
- proxy/stall.py: the hang watch; it may cut an attempt waiting on a stalled (or dead) backend for its
  first content, which then fails over like any failure before the first byte.
- proxy/resume.py: a stream that breaks after content went out (the engine died, hung or reset) is
  continued on the next candidate from the text the client already has, spliced into the same stream
  (`resume_streams`); where it cannot be, or no engine can take it, an error frame and `[DONE]` end it.
- proxy/relay.py: the answer to the client (whole, SSE pump, refusals, error frames, headers).
- proxy/accounting.py: in-flight (the registry's one count, from the moment of dispatch until the last
  byte: pitfall 4), device time, passive health, dispatch listeners and the observers of the record.

A watcher waits on `receive()` for `http.disconnect` and cancels the request's task: the upstream
response is closed at once, streaming or not, and the engine sees the connection drop.

`end_all(why)` ends every exchange in flight (the drain deadline of a shutdown): each request's task is
cancelled the same way, and the exchange answers for itself, a stream under way with an error frame and
`[DONE]`, a request with nothing sent yet with 503 `shutting_down`; its record is finished as usual and
one log line says so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import replace
from typing import Any

from gateway.backends.registry import Registry
from gateway.clock import monotonic
from gateway.proxy import relay
from gateway.proxy.accounting import Accounting, DispatchListener, Observer, take_stream_measures
from gateway.proxy.admission import Refused
from gateway.proxy.asgi import Receive, Send
from gateway.proxy.attempts import NO_BACKEND_LEFT, Failover, Tries
from gateway.proxy.breaker import Outcome, outcome_of
from gateway.proxy.engine_errors import UNSERVED_ENDPOINT, unserved_body, unserved_route
from gateway.proxy.exchange import (
    AttemptFailed,
    Exchange,
    InputRejected,
    Job,
    StreamCut,
    UnencodableBody,
    encoded,
)
from gateway.proxy.moves import StreamMoves
from gateway.proxy.reliability import Reliability
from gateway.proxy.resume import Resume, Transcript, count_tokens, resumable
from gateway.proxy.stall import Watched
from gateway.proxy.stream import MAX_FRAME_BYTES, SseMeter
from gateway.proxy.upstream import (
    UpstreamConnectError,
    UpstreamConnectTimeout,
    UpstreamError,
    UpstreamRefused,
    UpstreamResponse,
    UpstreamTimeout,
    UpstreamTransport,
)
from gateway.records import RequestRecord

__all__ = ["CLIENT_CLOSED", "DispatchListener", "Dispatcher", "Job", "Observer"]

log = logging.getLogger("gateway.dispatch")

CLIENT_CLOSED = 499  # nginx's convention for "the client went away before the answer"


class Dispatcher:
    def __init__(
        self,
        registry: Registry,
        transport: UpstreamTransport,
        max_attempts: int,
        observers: Sequence[Observer] = (),
        reliability: Reliability | None = None,
        on_dispatch: Sequence[DispatchListener] = (),
        first_content_s: float | None = None,
        resume_streams: bool = True,
        max_frame_bytes: int = MAX_FRAME_BYTES,
    ) -> None:
        self.registry = registry
        self.max_frame_bytes = max_frame_bytes  # an SSE frame past it breaks the stream (proxy/stream.py)
        self.resume_streams = resume_streams  # continue a stream broken mid-answer on another engine
        self.transport = transport
        self.reliability = reliability  # breakers and admission slots; None: neither is enforced
        # A request's whole time for its first content, from arrival (proxy/attempts.py).
        self.failover = Failover(registry, reliability, max_attempts, first_content_s)
        self.stall = reliability.stall if reliability is not None else None  # the hang watch
        self.moves: StreamMoves | None = None  # moves streams off an engine seen slowed (app wiring)
        self.accounting = Accounting(registry, observers, on_dispatch)
        self.live: set[Exchange] = set()  # exchanges in flight, for `end_all`

    @property
    def observers(self) -> list[Observer]:
        return self.accounting.observers

    @property
    def on_dispatch(self) -> list[DispatchListener]:
        """Called once per request, with the backend, when its first attempt is about to be sent
        upstream; never for a request refused before any attempt."""
        return self.accounting.on_dispatch

    def end_all(self, why: str) -> int:
        """End every exchange in flight now, for `why`; returns how many were told to (those whose answer
        is already going out finish by themselves)."""
        return sum(exchange.end(why) for exchange in list(self.live))

    async def run(self, job: Job, receive: Receive, send: Send) -> RequestRecord:
        exchange = Exchange(job, send)
        record = exchange.record
        task = asyncio.current_task()
        assert task is not None
        exchange.task = task
        api = job.upstream_api
        if self.resume_streams and resumable(api, job.body, job.stream):
            exchange.resume = Resume(Transcript(chat=api == "chat"))
        self.live.add(exchange)
        watcher = asyncio.create_task(exchange.watch_client(receive, task))
        try:
            await self._attempts(exchange)
        except asyncio.CancelledError:
            if exchange.gone:
                task.uncancel()
                record.status, record.error = CLIENT_CLOSED, "client disconnected"
            elif exchange.ending is not None:
                task.uncancel()
                log.warning("request %s ended by the gateway: %s", job.request_id, exchange.ending)
                await relay.ended(exchange, exchange.ending)
            else:
                raise
        finally:
            self.live.discard(exchange)
            watcher.cancel()
            record.e2e = monotonic() - job.started
            self.accounting.finish(record)
        return record

    async def _attempts(self, exchange: Exchange) -> None:
        job, record = exchange.job, exchange.record
        tries = Tries(job.started)
        try:
            while True:  # bounded by max_attempts and, when waiting for a comeback, the queue deadline
                queued_at = monotonic()
                taken = await self.failover.next(job, tries)
                record.queue_wait += monotonic() - queued_at
                if isinstance(taken, Refused):
                    if exchange.streaming or tries.last is None or taken.code != NO_BACKEND_LEFT:
                        await self._unanswerable(exchange, tries, relay.refuse(exchange, taken))
                        return
                    break  # no other backend can take it: answer with the last failure
                backend = taken.backend
                tries.tried.append(backend)
                record.backend, record.attempts = backend, record.attempts + 1
                try:
                    await self._attempt(exchange, backend, tries)
                    return
                except UnencodableBody as exc:
                    # The client's body, not the backend: no breaker outcome, no failover, a 400.
                    await self._unanswerable(exchange, tries, relay.bad_body(exchange, str(exc)))
                    return
                except InputRejected as rejected:
                    await self._unanswerable(exchange, tries, relay.rejected_input(exchange, rejected))
                    return
                except StreamCut as cut:
                    if cut.moved:
                        record.moved_from.append(backend)
                        log.info("request %s: %s, continuing it there", job.request_id, cut)
                    else:
                        record.failures.append((backend, str(cut)))
                        log.warning(
                            "request %s: %s broke mid-stream, continuing it: %s", job.request_id, backend, cut
                        )
                    record.resumed_from.append(backend)
                    tries = tries.after_cut(str(cut))
                except AttemptFailed as failed:
                    record.failures.append((backend, str(failed)))
                    log.warning(
                        "request %s: %s failed before the first byte: %s", job.request_id, backend, failed
                    )
                    tries.failed(backend, failed)
                finally:
                    taken.release()
            assert tries.last is not None, "dispatch needs at least one candidate"
            await self._unanswerable(exchange, tries, relay.last_failure(exchange, tries.last))
        finally:
            self._judged(tries, self._unjudged(tries))

    async def _unanswerable(
        self, exchange: Exchange, tries: Tries, answer: Coroutine[Any, Any, None]
    ) -> None:
        """`answer` goes out, unless the client's stream is under way (a continuation found no engine):
        then an error frame and `[DONE]` end it, saying why it broke."""
        if not exchange.streaming:
            await answer
            return
        answer.close()
        why = tries.cut or "the backend failed mid-stream"
        if tries.last is not None:
            why = f"{why}; continuing it failed: {tries.last}"
        await relay.cut_short(exchange, why)

    async def _attempt(self, exchange: Exchange, backend: str, tries: Tries) -> None:
        """One attempt on `backend`, its breaker asked first and told the outcome after. The body is
        encoded before the breaker is asked: a body that cannot be encoded (UnencodableBody) is the
        client's and never reaches the breaker.

        Blame is decided once, before the breakers hear of it: an engine's 5xx answer (not overload,
        not unavailable) is charged only once a second engine has judged the same request. The second
        serves it: the first one's failure counts. The second fails the same way: the input is the
        client's fault (InputRejected, a 400) and neither engine is charged."""
        body = await self._body(exchange, backend)
        ticket = self.failover.ticket(backend)
        outcome: Outcome = "failure"
        try:
            outcome = await self._forward(exchange, backend, body, self.failover.first_content_at(tries))
        except asyncio.CancelledError:
            outcome = "client_error"  # the client went away: says nothing about the backend
            raise
        except StreamCut as cut:
            outcome = "backpressure" if cut.moved else "failure"  # moved off a slow engine: no fault
            raise
        except AttemptFailed as failed:
            outcome = failed.outcome
            cause = failed.__cause__
            if isinstance(cause, UpstreamRefused):
                self.accounting.note_down(backend, str(failed))  # nothing listens: it is down, now
            elif isinstance(cause, UpstreamConnectError):
                failed.may_recover = True  # reset before the answer: it may be restarting, no proof
            if blames_input(failed):
                if tries.first_5xx is None:
                    tries.first_5xx = (backend, ticket, failed)  # judged by the next engine
                    ticket = None
                else:
                    outcome = "client_error"
                    first, _, first_failed = tries.first_5xx
                    self._judged(tries, "client_error")
                    raise InputRejected((first, first_failed), (backend, failed)) from failed
            raise
        finally:
            self.failover.settle(backend, ticket, outcome)
        # An answer: served, it proves the first engine's 5xx was the engine's; a 4xx, that it was not.
        self._judged(tries, "client_error" if outcome == "client_error" else "failure")
        if outcome == "success":
            self.accounting.note_success(backend)

    def _unjudged(self, tries: Tries) -> Outcome:
        """The outcome of an engine's 5xx no second engine judged (none left, as in a pool of one, or the
        client went away). It counts against the engine, as any failure does, unless the engine served a
        request within its breaker's window: then it is alive and answering, the 5xx most likely this
        input's, and charging it would let a run of such inputs open the breaker of an engine that serves
        everyone else (in a pool of one, every request would then get a 503)."""
        if tries.first_5xx is None or self.reliability is None:
            return "failure"
        backend, breakers = tries.first_5xx[0], self.reliability.breakers
        if backend in breakers and breakers[backend].served_recently():
            log.info("%s: a 5xx no other engine could judge, not charged: it serves others", backend)
            return "client_error"
        return "failure"

    def _judged(self, tries: Tries, outcome: Outcome) -> None:
        """The deferred outcome of the first engine's 5xx, now that it is known (or never will be)."""
        if tries.first_5xx is not None:
            backend, ticket, _ = tries.first_5xx
            tries.first_5xx = None
            self.failover.settle(backend, ticket, outcome)

    async def _body(self, exchange: Exchange, backend: str) -> bytes:
        """What `backend` is sent: the client's request, or the continuation of a stream that broke
        (proxy/resume.py). AttemptFailed, before any breaker hears of it, when `backend` cannot count the
        answer's tokens or the token limit leaves nothing to continue."""
        job, resume = exchange.job, exchange.resume
        if resume is None or not exchange.record.resumed_from:
            return job.body_for(backend)
        served = job.pool.served_name(backend)
        config = self.registry.backends[backend].config
        generated = await count_tokens(self.transport, config, served, resume.transcript.text)
        if generated is None:
            raise AttemptFailed(f"{backend} cannot count the answer's tokens to continue it", 502)
        body = resume.body(job.rewritten(served), job.upstream_api, served, generated)
        if body is None:
            raise AttemptFailed("the token limit leaves nothing to continue", 502)
        resume.generated = generated
        return encoded(body)

    async def _forward(
        self, exchange: Exchange, backend: str, body: bytes, first_content_at: float | None
    ) -> Outcome:
        """Send the request to `backend` and relay its answer; AttemptFailed before the first byte.

        Everything until the answer may go out (the response head, and a stream's first content or a
        whole body) runs in one timeout scope the hang watch (proxy/stall.py) may expire: a backend found
        stalled, or declared dead, while the request waits there fails the attempt, and another serves
        it. Once the answer goes out the scope has ended."""
        job, record = exchange.job, exchange.record
        state = self.registry.backends[backend]
        headers = {"content-type": "application/json", **state.config.auth_headers()}
        at_dispatch = self.accounting.dispatching(exchange, backend)
        stall = self.stall
        watched = (
            stall.enter(backend, job.stream, len(body), job.pool.backends) if stall is not None else None
        )
        if watched is not None and self.moves is not None and exchange.resume is not None:
            self.moves.track(watched, exchange)
        response: UpstreamResponse | None = None
        opened: relay.Opened | None = None
        moved: SseMeter | None = None
        payload = b""
        answer: Any = None
        try:
            try:
                async with asyncio.timeout(first_content_at) as scope:
                    if watched is not None:
                        watched.scope = scope
                    response = await self._send(state.config.url + job.path, headers, body, backend)
                    if response.status >= 500 or response.status == 429:
                        raise await _failed_answer(response)
                    if job.stream and response.status == 200:
                        relay.check_stream_type(response)
                        opened = await relay.open_stream(exchange, response, self.max_frame_bytes)
                    else:
                        payload = await relay.read_whole(response)
                        if unserved_route(response.status, payload):
                            raise self._unserved(exchange, backend, payload)
                        answer = relay.check_whole(response, payload)
                    if watched is not None:
                        watched.scope = None  # the answer goes out from here: never cut it
            except TimeoutError as exc:
                if not scope.expired():
                    raise
                raise _cut(watched, self.failover.first_content_s) from exc
            record.status = response.status
            if opened is not None:
                try:
                    await relay.stream(exchange, opened, watched)
                except StreamCut as cut:
                    moved = opened.meter if cut.moved else None
                    raise
            else:
                if watched is not None and self.stall is not None:
                    self.stall.heard(watched)
                await relay.whole(exchange, response, payload, answer)
            broke = response.status < 300 and record.error is not None  # mid-stream failure
            return "failure" if broke else outcome_of(response.status, None)
        finally:
            if watched is not None and self.stall is not None:
                self.stall.leave(watched)
                if self.moves is not None:
                    self.moves.untrack(watched)
            if response is not None:
                response.close()
            self.accounting.answered(exchange, backend, at_dispatch)
            if moved is not None:  # what it measured until moved: a sample of its pace (proxy/moves.py)
                record.moved_attempts.append((backend, moved_attempt(record, moved, job.started)))

    def _unserved(self, exchange: Exchange, backend: str, payload: bytes) -> AttemptFailed:
        """`backend` has no route for the request's path: remembered, so the router sends it no more of
        them; another backend may serve this one. Its fault is neither the client's nor a failure."""
        job = exchange.job
        self.accounting.note_unserved(backend, job.upstream_api, job.path)
        answer = (unserved_body(job.path, backend, payload), "application/json")
        failed = AttemptFailed(f"{backend} does not serve POST {job.path}", 404, answer)
        failed.outcome, failed.code, failed.answered = "client_error", UNSERVED_ENDPOINT, True
        return failed

    async def _send(self, url: str, headers: dict[str, str], body: bytes, backend: str) -> UpstreamResponse:
        """The upstream POST; AttemptFailed when no response head came (a connect timeout says so)."""
        try:
            return await self.transport.send(url, headers, body)
        except UpstreamConnectTimeout as exc:
            failed = AttemptFailed(f"connect timeout to backend {backend} ({exc})", 504)
            failed.code = "connect_timeout"
            raise failed from exc
        except UpstreamError as exc:
            raise AttemptFailed(str(exc), 504 if isinstance(exc, UpstreamTimeout) else 502) from exc


def moved_attempt(record: RequestRecord, meter: SseMeter, started: float) -> RequestRecord:
    """The record of an attempt whose stream was moved to another engine, as far as it went there: its
    engine's TTFT and decode pace, measured like any stream's (the request's own record goes on)."""
    attempt = replace(
        record, failures=[], resumed_from=[], moved_from=[], moved_attempts=[], stream_breaks=[]
    )
    take_stream_measures(attempt, meter, started)
    attempt.e2e = monotonic() - started
    return attempt


def _cut(watched: Watched | None, first_content_s: float | None) -> AttemptFailed:
    """The attempt's scope expired: the hang watch cut it, or the request's time for its first content
    ran out. Neither is a breaker failure."""
    if watched is not None and watched.cut is not None:
        failed = AttemptFailed(watched.cut, 504)
        failed.code = "backend_stalled"
        # The stall mark (lifted at its first byte), not the breaker, keeps requests away; once lifted
        # the backend may serve this request after all (a comeback wait, proxy/attempts.py).
        failed.may_recover = True
    else:
        failed = AttemptFailed(f"first-token timeout: no content within {first_content_s:g}s of arrival", 504)
        failed.code = "first_content_deadline"
    failed.outcome = "backpressure"
    return failed


async def _failed_answer(response: UpstreamResponse) -> AttemptFailed:
    """A 5xx (the engine broke) or a 429 or busy 503 (back-pressure): another backend may serve."""
    answer = await relay.read_quietly(response)
    text = answer[0].decode("utf-8", "replace") if answer else None
    failed = AttemptFailed(f"HTTP {response.status}", response.status, answer)
    failed.outcome = outcome_of(response.status, text)
    failed.answered = True
    return failed


def blames_input(failed: AttemptFailed) -> bool:
    """An engine's own 5xx answer for this request that is neither overload nor unavailability (502, 503
    and 504 say the engine, or what stands in front of it, could not take it): it may be the input."""
    return failed.answered and failed.outcome == "failure" and failed.status in _INPUT_STATUSES


_INPUT_STATUSES = frozenset(range(500, 600)) - {502, 503, 504}
