"""Relaying the answer to the client: a whole answer, an SSE stream pumped chunk by chunk (usage the
gateway asked for stripped, a failure mid-stream turned into an error frame), a refusal, or the last
failure when every attempt failed; and the gateway's own headers on each.

Every answer commits the exchange just before its last message goes out (`Exchange.commit`), so a
disconnect reported after it is not taken for the client going away.
"""

from __future__ import annotations

import contextlib

from gateway.proxy.accounting import take_stream_measures, take_usage
from gateway.proxy.admission import Refused
from gateway.proxy.asgi import send_bytes
from gateway.proxy.errors import error_body, error_frame
from gateway.proxy.exchange import AttemptFailed, Exchange
from gateway.proxy.reliability import ERROR_SOURCE, refusal_headers
from gateway.proxy.stream import SseMeter
from gateway.proxy.upstream import UpstreamError, UpstreamResponse, UpstreamTimeout

OVERHEAD_MS = b"x-gateway-overhead-ms"  # the gateway's own time: parse, route, rewrite (no queueing)
QUEUE_MS = b"x-gateway-queue-ms"  # time waiting for an admission slot (a full pool, a warm-up)


async def whole(exchange: Exchange, response: UpstreamResponse) -> None:
    """The whole answer at once. A body that cannot be read fails the attempt (nothing was sent yet)."""
    record = exchange.record
    try:
        payload = await response.read()
    except UpstreamError as exc:
        raise AttemptFailed(str(exc), 504 if isinstance(exc, UpstreamTimeout) else 502) from exc
    if response.status == 200:
        take_usage(record, payload)
    else:
        record.error = f"HTTP {response.status}"
    exchange.commit()
    await send_bytes(exchange.send, response.status, payload, headers(exchange, response.content_type))


async def stream(exchange: Exchange, response: UpstreamResponse) -> None:
    """Pump the SSE stream through as it arrives, measuring it on the way."""
    job, record, send = exchange.job, exchange.record, exchange.send
    head = headers(exchange, response.content_type)
    head.append((b"cache-control", b"no-cache"))
    await send({"type": "http.response.start", "status": 200, "headers": head})
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
    take_stream_measures(record, meter, job.started)
    exchange.commit()
    await send({"type": "http.response.body", "body": tail, "more_body": False})


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


async def last_failure(exchange: Exchange, last: AttemptFailed) -> None:
    """Every attempt failed: the last 5xx is passed through as it was, or 502/504 naming every failure."""
    record = exchange.record
    record.status, record.error = last.status, "; ".join(f"{b}: {why}" for b, why in record.failures)
    exchange.commit()
    content_type = last.answer[1] if last.answer is not None else "application/json"
    head = headers(exchange, content_type)
    if last.status in (429, 503):
        head.append((b"retry-after", b"1"))  # busy or failing everywhere: worth retrying soon
    if last.answer is not None:
        await send_bytes(exchange.send, last.status, last.answer[0], head)
    else:
        body = error_body(last.status, f"no backend answered: {record.error}", "upstream_unavailable")
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
