"""SSE pass-through with measurement.

The upstream bytes are split into frames (separated by a blank line: `\\n\\n` or `\\r\\n\\r\\n`, both
accepted) and each frame's original bytes are forwarded untouched; nothing is re-serialised. Each `data:`
payload is parsed once to learn what the client is being sent:
- the first frame carrying content (text, reasoning or a tool call; not vLLM's empty role frame) is the
  first token: TTFT; the gap between two content frames is one inter-token latency (ITL) sample;
- a frame with `usage` gives the token counts; when the gateway itself asked for usage (the client did
  not), the usage-only frame (`"choices": []`) is dropped before the client sees it;
- a frame with `error` is an upstream error after the stream started (status already 200);
- `answered` says when the frames so far are an answer the client must get from this backend: content,
  a finish (a `finish_reason` or the final usage frame), an error frame or `[DONE]`. Until then (the
  response head, vLLM's empty role frame, keep-alive comments) nothing is lost by trying another backend
  (proxy/relay.py holds them back).
Comment frames (`: keep-alive`, `: ping - ...`) pass through untouched.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

_CONTENT_KEYS = ("content", "reasoning", "reasoning_content", "tool_calls", "function_call")


class SseMeter:
    def __init__(self, strip_usage: bool, clock: Callable[[], float] = time.perf_counter) -> None:
        self.strip_usage = strip_usage
        self.clock = clock
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.itl: list[float] = []
        self.content_frames = 0
        self.usage: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.done = False
        self.finished = False  # a finish_reason before any content, or the final usage frame
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> bytes:
        """Take the bytes of one upstream read; return the bytes to forward now (whole frames only)."""
        if (
            not self._buf
            and chunk.endswith(b"\n\n")
            and chunk.find(b"\n\n") == len(chunk) - 2
            and b"\r" not in chunk
        ):
            # The usual read: exactly one whole LF-separated frame. Inspected in place, no buffer copies.
            return chunk if self._inspect(chunk[:-2], self.clock()) else b""
        buf = self._buf
        buf += chunk
        now = self.clock()
        start = emit_from = 0
        kept: list[bytes] = []
        while True:
            end, sep = _boundary(buf, start)
            if end < 0:
                break
            if not self._inspect(bytes(buf[start:end]), now):
                kept.append(bytes(buf[emit_from:start]))
                emit_from = end + sep
            start = end + sep
        if start == 0:
            return b""
        kept.append(bytes(buf[emit_from:start]))
        del buf[:start]
        return b"".join(kept)

    @property
    def answered(self) -> bool:
        """The frames so far commit the stream to its backend: content (text, reasoning or a tool call), a
        finish, an error frame or `[DONE]`. A role-only or empty delta, a usage count riding on such a
        frame (continuous usage stats) or a comment does not."""
        return self.first_token_at is not None or self.finished or self.error is not None or self.done

    def flush(self) -> bytes:
        """A trailing frame without its blank line, forwarded as it came (if it is kept)."""
        rest, self._buf = bytes(self._buf), bytearray()
        if rest.strip() and self._inspect(rest.rstrip(b"\r\n"), self.clock()):
            return rest
        return b""

    def _inspect(self, frame: bytes, now: float) -> bool:
        """Measure one frame (without its separator); False if it must not reach the client."""
        payload = _data(frame)
        if payload is None:
            return True
        if payload == b"[DONE]":
            self.done = True
            return True
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return True
        if not isinstance(event, dict):
            return True
        if event.get("error") is not None:
            error = event["error"]
            self.error = error if isinstance(error, dict) else {"message": str(error)}
            return True
        choices = event.get("choices")
        if _has_content(choices):
            self._token(now)
        elif self.first_token_at is None and _has_finish(choices):
            self.finished = True  # asked only before the first token: nothing more once content flows
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
            if choices:
                return True  # usage riding on a delta (continuous usage stats): not the final frame
            self.finished = True
            return not self.strip_usage
        return True

    def _token(self, now: float) -> None:
        self.content_frames += 1
        if self.first_token_at is None:
            self.first_token_at = now
        elif self.last_token_at is not None:
            self.itl.append(now - self.last_token_at)
        self.last_token_at = now


def _boundary(buf: bytearray, start: int) -> tuple[int, int]:
    """(index, length) of the next frame separator at or after `start`, or (-1, 0)."""
    lf = buf.find(b"\n\n", start)
    crlf = buf.find(b"\r\n\r\n", start, lf + 2 if lf >= 0 else len(buf))
    if crlf >= 0 and (lf < 0 or crlf < lf):
        return crlf, 4
    return (lf, 2) if lf >= 0 else (-1, 0)


def _data(frame: bytes) -> bytes | None:
    """The frame's data payload (multiple `data:` lines joined by newlines), or None for a comment."""
    if frame.startswith(b"data:") and b"\n" not in frame:
        return frame[5:].strip()
    lines = [line[5:].strip() for line in frame.splitlines() if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


def _has_content(choices: Any) -> bool:
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if choice.get("text"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict):
            for key in _CONTENT_KEYS:  # a plain loop: any() over a generator costs a frame per chunk
                if delta.get(key):
                    return True
    return False


def _has_finish(choices: Any) -> bool:
    if not isinstance(choices, list):
        return False
    return any(isinstance(choice, dict) and choice.get("finish_reason") for choice in choices)
