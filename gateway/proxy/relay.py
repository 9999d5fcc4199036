"""Relaying the answer to the client: a whole answer, an SSE stream pumped chunk by chunk (held back until
its first content so a backend dying before that is failed over, usage the gateway asked for stripped, a
failure mid-stream turned into an error frame), a refusal, the last failure when every attempt failed,
or the end the drain deadline puts to a request; and the gateway's own headers on each.

Every answer commits the exchange just before its last message goes out (`Exchange.commit`), so a
disconnect reported after it is not taken for the client going away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.proxy.accounting import take_stream_measures, take_usage
from gateway.proxy.admission import Refused
from gateway.proxy.asgi import send_bytes
from gateway.proxy.breaker import outcome_of
from gateway.proxy.engine_errors import normalised, normalised_frames
from gateway.proxy.errors import error_body, error_frame
from gateway.proxy.exchange import AttemptFailed, Exchange, InputRejected, StreamCut
from gateway.proxy.reliability import ERROR_SOURCE, refusal_headers
from gateway.proxy.stall import Watched
from gateway.proxy.stream import MAX_FRAME_BYTES, BadStream, SseMeter, split_frames
from gateway.proxy.upstream import UpstreamError, UpstreamResponse, UpstreamTimeout

OVERHEAD_MS = b"x-gateway-overhead-ms"  # the gateway's own time: parse, route, rewrite (no queueing)
QUEUE_MS = b"x-gateway-queue-ms"  # time waiting for an admission slot (a full pool, a warm-up)
SHUTTING_DOWN = "shutting_down"  # the error code of a request the drain deadline ended
# What a stream may hold back before it answers: what precedes the first content, i.e. vLLM's role frame
# (~200 bytes) and keep-alive comments (~15 bytes each). 64 KiB is hundreds of those, more than any engine
# sends before a token; a backend that gets there sends something not taken for content, and is then
# forwarded as it comes rather than buffered without bound. 1,000 streams waiting hold 64 MB at most.
HOLD_MAX_BYTES = 64 * 1024
DONE = b"data: [DONE]\n\n"
log = logging.getLogger(__name__)


def check_stream_type(response: UpstreamResponse) -> None:
    """A 200 to a stream request must be an event stream: an HTML page (a proxy's login or error page) or
    any other body is the engine's failure, not an answer to pass on. Before any byte went out."""
    if "text/event-stream" not in response.content_type:
        kind = response.content_type or "no content type"
        raise AttemptFailed(f"the backend answered a stream request with a 200 of {kind}, not SSE", 502)


def check_whole(response: UpstreamResponse, payload: bytes) -> Any:
    """A 200 whole answer, parsed: it must be a JSON object (every route relayed is a JSON API), anything
    else is the engine's failure and another engine may answer. None for another status."""
    if response.status != 200:
        return None
    try:
        answer = orjson.loads(payload)
    except orjson.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict):
        why = f"the backend answered 200 with a body that is not a JSON object: {payload[:80]!r}"
        raise AttemptFailed(why, 502)
    return answer


async def read_whole(response: UpstreamResponse) -> bytes:
    """A whole answer's body. One that cannot be read fails the attempt (nothing was sent yet)."""
    try:
        return await response.read()
    except UpstreamError as exc:
        raise AttemptFailed(str(exc), 504 if isinstance(exc, UpstreamTimeout) else 502) from exc


async def whole(exchange: Exchange, response: UpstreamResponse, payload: bytes, answer: Any = None) -> None:
    """The whole answer at once (`answer`: the body parsed by `check_whole`); an engine's error in the
    gateway's error shape, its message kept."""
    record = exchange.record
    content_type = response.content_type
    if response.status == 200:
        take_usage(record, answer)
    else:
        record.error = f"HTTP {response.status}"
    if response.status >= 400:
        payload, content_type = normalised(response.status, payload), "application/json"
    exchange.commit()
    await send_bytes(exchange.send, response.status, payload, headers(exchange, content_type))


@dataclass(slots=True)
class Opened:
    """A stream that has answered (`open_stream`), nothing of it sent yet: its meter, the rest of its
    reads, and what was held back until the answer."""

    meter: SseMeter
    chunks: AsyncIterator[bytes]
    held: bytes
    content_type: str


async def open_stream(
    exchange: Exchange, response: UpstreamResponse, max_frame_bytes: int = MAX_FRAME_BYTES
) -> Opened:
    """Read the SSE stream until it has answered (`_until_answered`); nothing reaches the client yet, so a
    failure until then fails the attempt (AttemptFailed) and the next backend serves the client a clean
    stream of its own."""
    transcript = exchange.resume.transcript if exchange.resume is not None else None
    meter = SseMeter(exchange.job.add_usage, transcript=transcript, max_frame_bytes=max_frame_bytes)
    if exchange.progress is not None:
        exchange.progress.meter = meter  # the router reads the stream's pace while it is pumped
    # The first-token timeout runs until content arrives (a role frame is not a token).
    chunks = response.iter_chunks(lambda: meter.first_token_at is not None)
    held = await _until_answered(meter, chunks)
    return Opened(meter, chunks, held, response.content_type)


async def stream(exchange: Exchange, opened: Opened, watched: Watched | None = None) -> None:
    """Pump the answered SSE stream through as it arrives, measuring it on the way: the head and what
    was held first, then each read as it comes. A stream continuing one that broke (proxy/resume.py)
    sends no head: its frames are spliced into the client's stream. A failure from here on ends the
    stream with an error frame, or, when the answer can be continued elsewhere, raises StreamCut with
    nothing sent. The hang watch (`watched`) may cut a stream whose backend stalled: it ends the same
    way, at once, rather than after the idle timeout."""
    job, record, send = exchange.job, exchange.record, exchange.send
    meter, chunks = opened.meter, opened.chunks
    resume = exchange.resume
    splice = resume.splice if resume is not None and exchange.streaming else None
    if splice is None:
        head = headers(exchange, opened.content_type)
        head.append((b"cache-control", b"no-cache"))
        await send({"type": "http.response.start", "status": 200, "headers": head})
        exchange.streaming = True
    tail = b""
    try:
        async with asyncio.timeout(None) as scope:
            if watched is not None:
                watched.meter, watched.scope, watched.committed = meter, scope, True
            if held := _forwarded(opened.held, splice):
                await send({"type": "http.response.body", "body": held, "more_body": True})
            async for chunk in chunks:  # the same reads, past what was held
                quiet = meter.error is None
                out = meter.feed(chunk)
                if quiet and meter.error is not None:  # the engine's error frame, in the gateway's shape
                    out = normalised_frames(out)
                failed = _engine_failure(meter.error) if quiet and meter.error is not None else None
                cut = failed is not None and _continues(exchange, meter)  # the rest comes from elsewhere
                if out := _forwarded(_before_error(out) if cut else out, splice):
                    await send({"type": "http.response.body", "body": out, "more_body": True})
                if cut:
                    _count_break(exchange, "engine_error_frame")
                    raise StreamCut(f"the backend sent an error mid-stream: {failed}")
                if meter.broken is not None:  # the whole frames before it went out above
                    raise meter.broken
                if meter.done:  # the answer is over: what the engine sends after it is not read
                    _after_done(exchange, meter)
                    break
            tail = _forwarded(meter.flush(), splice)
            if not meter.done and meter.error is None:
                if tail:  # the last frame came without its blank line: it goes out before the end
                    await send({"type": "http.response.body", "body": tail, "more_body": True})
                tail = _ended(exchange, meter, splice)
    except UpstreamError as exc:
        # The status is already 200: the client learns of the failure from an error frame.
        code = exc.code if isinstance(exc, BadStream) else "upstream_stream_error"
        tail = _broke(exchange, meter, f"the backend failed mid-stream: {exc}", code)
    except TimeoutError:
        if watched is None or watched.cut is None or not scope.expired():
            raise
        if watched.moving and _continues(exchange, meter):  # proxy/moves.py checked it could
            raise StreamCut(watched.cut, moved=True) from None
        tail = _broke(exchange, meter, f"{watched.cut} (mid-stream)", "backend_stalled")
    finally:
        if watched is not None:
            watched.scope = None
    take_stream_measures(record, meter, job.started)
    if splice is not None and resume is not None:
        resume.settle(record)
    exchange.commit()
    await send({"type": "http.response.body", "body": tail, "more_body": False})


def _forwarded(data: bytes, splice: Callable[[bytes], bytes] | None) -> bytes:
    """What of `data` goes to the client: as it came, or spliced into the stream it continues."""
    return splice(data) if data and splice is not None else data


def _after_done(exchange: Exchange, meter: SseMeter) -> None:
    """Frames the engine sent after its `[DONE]` in the same read were dropped: say so."""
    if meter.after_done:
        backend, count = exchange.record.backend, meter.after_done
        request = exchange.job.request_id
        log.warning("request %s: %s sent %d frames after [DONE], dropped", request, backend, count)


def _ended(exchange: Exchange, meter: SseMeter, splice: Callable[[bytes], bytes] | None) -> bytes:
    """The engine ended the stream cleanly but without `[DONE]` (or a typed stream's last event). After
    the answer's finish only the terminator is missing: the client gets it from the gateway. Before the
    finish the answer is cut short, which is a break like a reset (`_broke`), never a success."""
    if meter.complete:
        return b"" if meter.typed else _forwarded(DONE, splice)
    why = "the backend ended the stream before its finish_reason and [DONE]"
    return _broke(exchange, meter, why, "stream_ended_early")


def _broke(exchange: Exchange, meter: SseMeter, why: str, code: str) -> bytes:
    """A stream broke after its answer went out: StreamCut when another engine can write the rest
    (nothing more is sent here), else the error frame and `[DONE]` that end it. Counted by `code`."""
    _count_break(exchange, code)
    if _continues(exchange, meter):
        raise StreamCut(why)
    exchange.record.error = why
    log.warning("request %s: %s: %s", exchange.job.request_id, exchange.record.backend, why)
    return error_frame(why, code) + DONE


def _count_break(exchange: Exchange, cause: str) -> None:
    """A stream broke mid-answer on its backend (`gateway_stream_breaks`, by backend and cause)."""
    record = exchange.record
    record.stream_breaks.append((record.backend or "none", cause))


def _continues(exchange: Exchange, meter: SseMeter) -> bool:
    """Whether another engine can write the rest of this stream now (proxy/resume.py); it keeps the
    client's time to first content for the record."""
    resume = exchange.resume
    answered = meter.first_token_at is not None or bool(exchange.record.resumed_from)
    if resume is None or not resume.can_continue(answered):
        return False
    if resume.ttft is None and meter.first_token_at is not None:
        resume.ttft = meter.first_token_at - exchange.job.started
    return True


def _before_error(data: bytes) -> bytes:
    """The frames of `data` before its error frame (the engine's `[DONE]` after it is dropped too)."""
    kept: list[bytes] = []
    for frame, separator in split_frames(data):
        if frame.startswith(b"data:") and b'"error"' in frame:
            break
        kept.append(frame + separator)
    return b"".join(kept)


async def cut_short(exchange: Exchange, why: str) -> None:
    """A broken stream no other engine could continue: its error frame and `[DONE]` end it."""
    exchange.record.error = why
    exchange.commit()
    tail = error_frame(why, "upstream_stream_error") + b"data: [DONE]\n\n"
    await exchange.send({"type": "http.response.body", "body": tail, "more_body": False})


async def _until_answered(meter: SseMeter, chunks: AsyncIterator[bytes]) -> bytes:
    """Read until the stream answers (`SseMeter.answered`: content, a finish, an error frame, `[DONE]`) and
    return what was held back meanwhile (vLLM's role frame, keep-alive comments), to go out with the
    response head. The hold is bounded in time by the first-token timeout (the transport bounds every
    read of this phase by it) and in bytes by HOLD_MAX_BYTES. AttemptFailed when the backend breaks,
    times out or ends the stream before answering, or answers with an error frame that blames the
    backend (as the same status would as an HTTP answer): nothing was sent, another backend may serve."""
    held: list[bytes] = []
    size = 0
    try:
        async for chunk in chunks:
            out = meter.feed(chunk)
            if out:
                held.append(out)
                size += len(out)
            if meter.broken is not None:
                raise meter.broken
            if meter.answered or size > HOLD_MAX_BYTES:
                break
        else:
            rest = meter.flush()
            if rest:
                held.append(rest)
            if not meter.answered:
                raise AttemptFailed("the backend's stream ended before any content", 502)
    except UpstreamError as exc:
        status = 504 if isinstance(exc, UpstreamTimeout) else 502
        raise AttemptFailed(f"{exc} (after the response head, before any content)", status) from exc
    if meter.error is not None and meter.first_token_at is None:
        failed = _error_before_content(meter.error)
        if failed is not None:
            raise failed
        return normalised_frames(b"".join(held))  # the request's fault: its error frame goes out
    return b"".join(held)


def _engine_failure(error: dict[str, Any]) -> str | None:
    """An engine's error frame judged as its code would be in an HTTP answer: "HTTP <code> <message>" for
    a failure or back-pressure (the engine's), None for the request's own fault or a frame without a
    numeric code."""
    code = error.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        return None
    message = str(error.get("message", ""))
    return f"HTTP {code} {message}" if outcome_of(code, message) in ("failure", "backpressure") else None


def _error_before_content(error: dict[str, Any]) -> AttemptFailed | None:
    """An error frame before any content: the engine's failure or back-pressure fails the attempt (the
    engine's error is kept, passed through if it is the last); the request's own fault, or a frame
    without a numeric code, is the answer and goes to the client."""
    if _engine_failure(error) is None:
        return None
    code, message = error["code"], str(error.get("message", ""))
    outcome = outcome_of(code, message)
    status = code if code == 429 or 500 <= code < 600 else 502
    answer = (orjson.dumps({"error": error}), "application/json")
    failed = AttemptFailed(f"error frame before any content: HTTP {code} {message}", status, answer)
    failed.outcome = outcome
    failed.answered = True
    return failed


async def ended(exchange: Exchange, why: str) -> None:
    """The gateway ends the exchange (the drain deadline passed): a stream under way gets an error frame
    and `[DONE]`; a request with nothing sent yet gets a 503 `shutting_down`."""
    record = exchange.record
    record.error, record.ended_by_gateway = why, True  # says nothing about the backend
    exchange.commit()
    if exchange.streaming:
        tail = error_frame(why, SHUTTING_DOWN, 503) + b"data: [DONE]\n\n"
        await exchange.send({"type": "http.response.body", "body": tail, "more_body": False})
        return
    record.status = 503
    head = [(b"content-type", b"application/json"), (b"connection", b"close"), (ERROR_SOURCE, b"gateway")]
    head.append((b"x-gateway-profile", exchange.job.profile.encode()))
    await send_bytes(exchange.send, 503, error_body(503, why, SHUTTING_DOWN), head)


async def refuse(exchange: Exchange, refused: Refused) -> None:
    """The gateway's own refusal (a full queue, a deadline, a warm-up), with its Retry-After."""
    record = exchange.record
    record.status, record.error = refused.status, refused.code
    exchange.commit()
    body = error_body(refused.status, refused.message, refused.code)
    head = [(b"content-type", b"application/json"), *refusal_headers(refused)]
    head.append((b"x-gateway-profile", exchange.job.profile.encode()))
    head.append((QUEUE_MS, _ms(record.queue_wait)))
    await send_bytes(exchange.send, refused.status, body, head)


async def bad_body(exchange: Exchange, why: str) -> None:
    """The client's body could not be forwarded (it cannot be re-encoded): 400, no backend blamed."""
    record = exchange.record
    record.status, record.error = 400, "invalid_request"
    exchange.commit()
    head = [(b"content-type", b"application/json"), (ERROR_SOURCE, b"gateway")]
    head.append((b"x-gateway-profile", exchange.job.profile.encode()))
    body = error_body(400, f"the request body cannot be forwarded: {why}", "invalid_request")
    await send_bytes(exchange.send, 400, body, head)


async def rejected_input(exchange: Exchange, rejected: InputRejected) -> None:
    """Two engines failed the same request the same way: the input is the client's, a 400 saying so."""
    record = exchange.record
    (first, one), (second, other) = rejected.first, rejected.second
    record.failures.append((second, str(other)))
    record.status, record.error = 400, f"engines rejected the input: {rejected}"
    exchange.commit()
    said = _engine_message(other)
    message = (
        f"the engines rejected this input: {first} answered HTTP {one.status}, {second} HTTP {other.status}"
        + (f" ({said})" if said else "")
    )
    head = [(b"content-type", b"application/json"), (ERROR_SOURCE, b"gateway")]
    head.append((b"x-gateway-backend", second.encode()))
    head.append((b"x-gateway-profile", exchange.job.profile.encode()))
    await send_bytes(exchange.send, 400, error_body(400, message, "engine_rejected_input"), head)


def _engine_message(failed: AttemptFailed) -> str:
    """The engine's own error message, when its answer has one (cut short: it goes to the client)."""
    if failed.answer is None:
        return ""
    try:
        error = orjson.loads(failed.answer[0]).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return ""
    message = error.get("message") if isinstance(error, dict) else error
    return str(message)[:300] if message else ""


async def last_failure(exchange: Exchange, last: AttemptFailed) -> None:
    """Every attempt failed: the last engine's error answer (in the gateway's error shape, its message
    kept), or 502/504 naming every failure."""
    record = exchange.record
    record.status, record.error = last.status, "; ".join(f"{b}: {why}" for b, why in record.failures)
    exchange.commit()
    head = headers(exchange, "application/json")
    if last.status in (429, 503):
        head.append((b"retry-after", b"1"))  # busy or failing everywhere: worth retrying soon
    if last.answer is not None:
        await send_bytes(exchange.send, last.status, normalised(last.status, last.answer[0]), head)
    else:
        code = last.code or "upstream_unavailable"
        body = error_body(last.status, f"no backend answered: {record.error}", code)
        await send_bytes(exchange.send, last.status, body, head)


def headers(exchange: Exchange, content_type: str) -> list[tuple[bytes, bytes]]:
    """The answer's content type and the gateway's headers: backend, profile, own time, queue time."""
    record = exchange.record
    head = [
        (b"content-type", content_type.encode("latin-1")),
        (b"x-gateway-backend", (record.backend or "").encode()),
        (b"x-gateway-profile", exchange.job.profile.encode()),
        (OVERHEAD_MS, _ms(record.overhead)),
        (QUEUE_MS, _ms(record.queue_wait)),
    ]
    if record.status >= 500:
        head.append((ERROR_SOURCE, b"upstream"))  # a backend failed or answered it, not the gateway
    return head


async def read_quietly(response: UpstreamResponse) -> tuple[bytes, str] | None:
    """A failed answer's body and content type, to pass through if it is the last; None if unreadable."""
    with contextlib.suppress(UpstreamError):
        return await response.read(), response.content_type
    return None


def _ms(seconds: float) -> bytes:
    return f"{seconds * 1000:.3f}".encode()
