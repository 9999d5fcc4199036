"""A small streaming OpenAI client that times each request the way `vllm bench serve` does.

TTFT: send -> first content chunk. ITL: every gap between consecutive content chunks, so the bursts of a
speculative engine (several tokens in one chunk, then a longer gap) stay visible. TPOT: decode time per
token after the first, (e2e - ttft) / (tokens - 1), which smooths those bursts out (seed 003, test D:
ITL 55 ms vs TPOT 23.5 ms under MTP).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson


@dataclass(frozen=True)
class RequestResult:
    """One request's timings in seconds, relative to the moment it was sent."""

    ok: bool
    output_tokens: int = 0
    e2e_s: float = 0.0
    chunk_times_s: tuple[float, ...] = ()  # arrival time of each content chunk
    error: str = ""

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_times_s[0] if self.chunk_times_s else None

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    @property
    def itls_s(self) -> list[float]:
        times = self.chunk_times_s
        return [later - earlier for earlier, later in zip(times, times[1:], strict=False)]

    def scaled(self, factor: float) -> RequestResult:
        """The same request with every duration multiplied (wall clock -> simulated time)."""
        return RequestResult(
            ok=self.ok,
            output_tokens=self.output_tokens,
            e2e_s=self.e2e_s * factor,
            chunk_times_s=tuple(t * factor for t in self.chunk_times_s),
            error=self.error,
        )


@dataclass
class _Stream:
    """What has been seen of one SSE stream so far."""

    chunk_times: list[float] = field(default_factory=list)
    chunks_with_text: int = 0
    usage_tokens: int | None = None
    error: str = ""


class StreamingClient:
    """Streams /v1/completions from one OpenAI-compatible base URL and times every content chunk."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, model: str) -> None:
        self._session = session
        self._url = base_url.rstrip("/") + "/v1/completions"
        self._model = model

    async def complete(self, prompt: str, max_tokens: int) -> RequestResult:
        body = {
            "model": self._model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        start = time.perf_counter()
        stream = _Stream()
        try:
            async with self._session.post(
                self._url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}
            ) as response:
                if response.status != 200:
                    text = (await response.text())[:200]
                    return RequestResult(
                        ok=False, e2e_s=time.perf_counter() - start, error=f"HTTP {response.status}: {text}"
                    )
                async for raw in response.content:
                    _consume_line(raw, stream, time.perf_counter() - start)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return RequestResult(ok=False, e2e_s=time.perf_counter() - start, error=repr(exc))
        e2e = time.perf_counter() - start
        tokens = stream.usage_tokens if stream.usage_tokens is not None else stream.chunks_with_text
        ok = not stream.error and bool(stream.chunk_times)
        return RequestResult(
            ok=ok,
            output_tokens=tokens,
            e2e_s=e2e,
            chunk_times_s=tuple(stream.chunk_times),
            error=stream.error or ("" if ok else "no content received"),
        )


def _consume_line(raw: bytes, stream: _Stream, now: float) -> None:
    line = raw.strip()
    if not line.startswith(b"data:"):
        return
    payload = line[5:].strip()
    if payload == b"[DONE]":
        return
    try:
        event: dict[str, Any] = orjson.loads(payload)
    except orjson.JSONDecodeError:
        stream.error = f"unparseable event: {payload[:80]!r}"
        return
    if "error" in event:
        stream.error = str(event["error"])[:200]
        return
    usage = event.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        stream.usage_tokens = usage["completion_tokens"]
    for choice in event.get("choices") or []:
        if choice.get("text"):
            stream.chunk_times.append(now)
            stream.chunks_with_text += 1
            break
