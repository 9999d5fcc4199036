"""The soak's load: one streamed request as a client sees it, and how its end is counted.

Each request ends as exactly one of:

- completed: 200 and the stream ends with `data: [DONE]` and no error frame;
- errors (clear): a refusal with Retry-After (429/503), or a stream that started and then carried an
  error frame because its backend died under it (it cannot be replayed: tokens were already sent);
- lost: anything else (a 5xx without Retry-After, a dropped connection, a stream cut without [DONE]);
- hung: no end within the watchdog. Its kind says how far it got (no response head yet, or the head and
  so many bytes, the last one how long before the watchdog), so a hang can be placed.
"""

from __future__ import annotations

import asyncio
import json
import random
import time

import aiohttp

MODEL = "soak-model"
WATCHDOG_S = 60.0  # a request still open after this long is hung (gateway timeouts are far shorter)


async def one_request(
    session: aiohttp.ClientSession, url: str, rng: random.Random, tag: str, watchdog_s: float = WATCHDOG_S
) -> tuple[str, str]:
    """(outcome, kind): the outcome as counted, and what exactly the client saw, for the breakdown.
    `tag` travels as the request's `user`, so the gateway's records can be matched to it."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "tell me a story " * rng.randint(1, 20)}],
        "max_tokens": rng.randint(8, 48),
        "stream": True,
        "user": tag,
    }
    seen = _Seen(time.monotonic())
    headers = {"x-request-id": tag}  # the gateway logs it: a hung request's story can be found there
    try:
        async with asyncio.timeout(watchdog_s):
            async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as response:
                seen.head = f"{response.status} from {response.headers.get('x-gateway-backend', '-')}"
                async for chunk in response.content.iter_any():
                    seen.raw += chunk
                    seen.last = time.monotonic()
                return _judged(response, seen.raw)
    except TimeoutError:
        return "hung", f"no end within the watchdog: {seen.where()} ({tag}, at {time.strftime('%X')})"
    except aiohttp.ClientError as exc:
        return "lost", f"{type(exc).__name__}: {str(exc)[:60]}"


class _Seen:
    """How far a request got, for a hung one's kind."""

    __slots__ = ("began", "head", "raw", "last")

    def __init__(self, began: float) -> None:
        self.began = began
        self.head: str | None = None
        self.raw = b""
        self.last = began

    def where(self) -> str:
        if self.head is None:
            return "no response head"
        quiet = time.monotonic() - self.last
        return f"head {self.head}, {len(self.raw)} bytes, silent for the last {quiet:.0f} s"


def _judged(response: aiohttp.ClientResponse, raw: bytes) -> tuple[str, str]:
    if response.status in (429, 503) and "retry-after" in response.headers:
        return "errors", f"{response.status} {_code(raw)}{_causes(raw)}"
    if response.status != 200:
        return "lost", f"{response.status} {_code(raw)}{_causes(raw)}"
    if b'"error"' in raw:  # the backend died mid-stream: an error frame (its code says why), the end
        return "errors", f"200 stream error frame {_frame_code(raw)}"
    if raw.rstrip().endswith(b"data: [DONE]"):
        return "completed", "200"
    return "lost", "200 stream cut without [DONE]"


def _frame_code(raw: bytes) -> str:
    """The code of a stream's error frame (`upstream_stream_error`, `stream_ended_early`, ...)."""
    for part in raw.split(b"\n\n"):
        if part.startswith(b"data: {") and b'"error"' in part:
            try:
                return str(json.loads(part[6:])["error"]["code"])
            except (ValueError, KeyError, TypeError):
                return "?"
    return "?"


def _code(raw: bytes) -> str:
    try:
        return str(json.loads(raw)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "?"


# How the gateway words each failed attempt ("e1: <why>") -> a short cause, for the breakdown. The first
# marker found names it; the order puts the more specific wordings first. Every wording dispatch and the
# relay use is here (proxy/dispatch.py, proxy/relay.py, proxy/upstream.py, proxy/stall.py).
_CAUSES = (
    ("ClientConnectorError: Connection refused", "refused"),
    ("ClientConnectorError", "connect error"),
    ("connect timeout", "connect timeout"),
    ("circuit breaker open", "breaker open"),
    ("stream ended before any content", "ended before content"),  # the engine closed its stream early
    ("broke off", "reset"),  # the connection broke under a response: a killed engine
    ("not SSE", "bad answer"),
    ("not a JSON object", "bad answer"),
    ("SSE frame", "bad answer"),
    ("data frame", "bad answer"),
    ("stalled", "stalled"),
    ("is down", "down"),
    ("in time", "timeout"),
    ("first-token timeout", "timeout"),
    ("idle timeout", "timeout"),
    ("TimeoutError", "timeout"),
    ("Disconnected", "reset"),
    ("ClientOSError", "reset"),
    ("cannot count", "continuation"),
    ("nothing to continue", "continuation"),
    ("HTTP ", "5xx"),
)


def cause_of(attempt: str) -> str:
    """The short cause of one failed attempt's wording; one the table does not know is named by its own
    first words, never left anonymous."""
    for marker, cause in _CAUSES:
        if marker in attempt:
            return cause
    why = attempt.split(":", 1)[1] if ":" in attempt else attempt
    return "unknown: " + " ".join(why.split()[:6])


def _causes(raw: bytes) -> str:
    """The causes of the failed attempts behind a gateway 5xx, e.g. " (refused, reset)": which failures
    left the request with no backend, so a lost request says why it was not waited for."""
    try:
        message = str(json.loads(raw)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return ""
    if "no backend answered:" not in message:
        return ""
    attempts = message.split("no backend answered:", 1)[1].split(";")
    return f" ({', '.join(sorted(cause_of(a) for a in attempts))})"
