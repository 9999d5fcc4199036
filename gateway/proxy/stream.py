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

The Anthropic Messages and Responses streams (`event:` lines, typed `data:` objects, no `[DONE]`) are
measured the same way: a `content_block_delta` with text, tool input or thinking (or a tool_use block
starting), a `response.*.delta` with text, reasoning or tool arguments, is content; `message_start` and
`message_delta` (Messages) and `response.completed` (Responses) carry the usage, kept as
`prompt_tokens` / `completion_tokens` whatever the API calls them; `message_stop` and the final
`response.*` event end the stream. `message_start`, `content_block_start` of a text block,
`response.created` and `ping` are held like a role frame: nothing is lost by trying another backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import orjson

from gateway.clock import reader
from gateway.proxy.upstream import UpstreamError

# The largest SSE frame an engine may send (limits.max_sse_frame_bytes): a token's frame is ~200 bytes,
# a Responses stream's final event repeats the whole answer. Past it the stream is broken, not buffered.
MAX_FRAME_BYTES = 8 * 1024 * 1024
_BAD = "bad_frame"  # BadStream's code for a data frame that is not a JSON object nor `[DONE]`


class BadStream(UpstreamError):
    """The engine's stream broke the SSE protocol (`code` says how): a failure of the engine, handled
    like a reset, before the first content (failover) or after it (continued or an error frame)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


_CONTENT_KEYS = ("content", "reasoning", "reasoning_content", "tool_calls", "function_call")
# Typed events that carry generated content: Messages deltas, Responses text, reasoning and tool deltas.
_DELTA_EVENTS = frozenset(
    {
        "content_block_delta",
        "response.output_text.delta",
        "response.refusal.delta",
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
        "response.function_call_arguments.delta",
    }
)
_DELTA_KEYS = ("text", "partial_json", "thinking")
# A Responses stream's last event: done, stopped short (max_output_tokens) or failed.
_FINAL_RESPONSE_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


class Transcribes(Protocol):
    """What keeps the text of an OpenAI stream as it goes out (proxy/resume.Transcript)."""

    def take(self, event: dict[str, Any], choices: Any) -> None: ...


class SseMeter:
    def __init__(
        self,
        strip_usage: bool,
        clock: Callable[[], float] | None = None,
        transcript: Transcribes | None = None,
        max_frame_bytes: int = MAX_FRAME_BYTES,
    ) -> None:
        self.strip_usage = strip_usage
        self.max_frame_bytes = max_frame_bytes
        self.clock = clock if clock is not None else reader()  # read per chunk: chosen once
        self.transcript = transcript  # told every frame with `choices`, for a stream that may be resumed
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.itl: list[float] = []
        self.content_frames = 0
        self.usage: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.done = False
        self.finished = False  # a finish_reason before any content, or the final usage frame
        # The answer's end was seen: a finish_reason (before or after content), the final usage frame, or
        # a typed stream's last event. A stream that stops without it (or `done`) broke.
        self.complete = False
        self.typed = False  # an Anthropic Messages or Responses stream: it ends without `[DONE]`
        self._buf = bytearray()
        # The engine broke the protocol (a frame past the cap, a data frame that is not JSON): the frames
        # before it went out, the stream ends at the next read.
        self.broken: BadStream | None = None
        self.after_done = 0  # frames the engine sent after `[DONE]`: dropped

    def feed(self, chunk: bytes) -> bytes:
        """Take the bytes of one upstream read; return the bytes to forward now (whole frames only).
        BadStream once the engine broke the protocol (at the read after it, or `flush`)."""
        if self.broken is not None:
            raise self.broken
        if (
            not self._buf
            and chunk.endswith(b"\n\n")
            and chunk.find(b"\n\n") == len(chunk) - 2
            and b"\r" not in chunk
        ):
            # The usual read: exactly one whole LF-separated frame. Inspected in place, no buffer copies.
            return chunk if self._inspect(chunk[:-2], self.clock()) else b""
        buf = self._buf
        # What was buffered holds no whole separator: only its last 3 bytes may begin one, so the search
        # covers the new bytes (a frame arriving in a thousand reads is searched once, not 500 times).
        searched = max(0, len(buf) - 3)
        buf += chunk
        now = self.clock()
        start = emit_from = 0
        kept: list[bytes] = []
        while True:
            end, sep = _boundary(buf, max(start, searched))
            if end < 0:
                break
            if not self._inspect(bytes(buf[start:end]), now):
                kept.append(bytes(buf[emit_from:start]))
                emit_from = end + sep
            start = end + sep
        if len(buf) - start > self.max_frame_bytes:
            # The whole frames before it still go out (the transcript has their text); the oversized
            # one is dropped now, and the next read or the end raises.
            self.broken = BadStream(
                f"the backend sent an SSE frame over {self.max_frame_bytes} bytes", "frame_too_large"
            )
            kept.append(bytes(buf[emit_from:start]))
            buf.clear()
            return b"".join(kept)
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
        if self.broken is not None:
            raise self.broken
        rest, self._buf = bytes(self._buf), bytearray()
        if rest.strip() and self._inspect(rest.rstrip(b"\r\n"), self.clock()):
            return rest
        return b""

    def _inspect(self, frame: bytes, now: float) -> bool:
        """Measure one frame (without its separator); False if it must not reach the client."""
        if self.done or self.broken is not None:
            self.after_done += self.done  # the answer was over: nothing more reaches the client
            return False
        payload = frame_data(frame)
        if payload is None:
            return True
        if payload == b"[DONE]":
            self.done = True
            return True
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            self.broken = BadStream(f"the backend sent a data frame that is not JSON: {payload[:80]!r}", _BAD)
            return False
        if not isinstance(event, dict):
            self.broken = BadStream(f"the backend sent a data frame not an object: {payload[:80]!r}", _BAD)
            return False
        if event.get("error") is not None:
            error = event["error"]
            self.error = error if isinstance(error, dict) else {"message": str(error)}
            return True
        choices = event.get("choices")
        if choices is None and isinstance(event.get("type"), str):
            self._typed_event(event, now)  # the Anthropic and Responses streams: typed events
            return True
        if self.transcript is not None and choices is not None:
            self.transcript.take(event, choices)
        if _has_content(choices):
            self._token(now)
            if _has_finish(choices):
                self.complete = True  # the last token and the finish in one frame
        elif _has_finish(choices):
            self.complete = True
            if self.first_token_at is None:
                self.finished = True
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
            if choices:
                return True  # usage riding on a delta (continuous usage stats): not the final frame
            self.finished = self.complete = True
            return not self.strip_usage
        return True

    def _typed_event(self, event: dict[str, Any], now: float) -> None:
        """One event of an Anthropic Messages or a Responses stream (both end without [DONE])."""
        self.typed = True
        kind = event["type"]
        if kind in _DELTA_EVENTS:
            if _event_has_content(event):
                self._token(now)
        elif kind == "content_block_start":
            block = event.get("content_block")
            if isinstance(block, dict) and (block.get("type") == "tool_use" or block.get("text")):
                self._token(now)  # a tool call begins (its name is content), or text rides on the start
        elif kind == "message_start":
            message = event.get("message")
            self._take_usage(message.get("usage") if isinstance(message, dict) else None)
        elif kind == "message_delta":
            self._take_usage(event.get("usage"))
            self.finished = self.complete = True  # its stop_reason ends the message
        elif kind == "message_stop":
            self.finished = self.complete = self.done = True
        elif kind in _FINAL_RESPONSE_EVENTS:
            response = event.get("response")
            if isinstance(response, dict):
                self._take_usage(response.get("usage"))
                error = response.get("error")
                if kind == "response.failed" and self.error is None:
                    self.error = error if isinstance(error, dict) else {"message": "the response failed"}
            self.finished = self.complete = self.done = True
        elif kind == "error":  # Responses: {"type": "error", "code", "message"}
            self.error = {"message": str(event.get("message", "")), "code": event.get("code")}

    def _take_usage(self, usage: Any) -> None:
        counts = usage_counts(usage)
        if counts is None:
            return
        old = self.usage or {}
        # message_start carries the input, message_delta the output so far (and sometimes the input again).
        prompt = counts[0] if counts[0] is not None else old.get("prompt_tokens")
        completion = counts[1] if counts[1] is not None else old.get("completion_tokens")
        self.usage = {"prompt_tokens": prompt, "completion_tokens": completion}

    def _token(self, now: float) -> None:
        self.content_frames += 1
        if self.first_token_at is None:
            self.first_token_at = now
        elif self.last_token_at is not None:
            self.itl.append(now - self.last_token_at)
        self.last_token_at = now


def usage_counts(usage: Any) -> tuple[int | None, int | None] | None:
    """(prompt tokens, output tokens) of a `usage` object in any API's spelling: chat's prompt_tokens /
    completion_tokens, Messages' and Responses' input_tokens / output_tokens (Messages counts cached
    input apart: cache reads and writes are prompt tokens too). None when it is not a usage object."""
    if not isinstance(usage, dict):
        return None
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    prompt = _count(usage.get("input_tokens"))
    if prompt is not None:
        cached = (
            _count(usage.get(k)) or 0 for k in ("cache_read_input_tokens", "cache_creation_input_tokens")
        )
        prompt += sum(cached)
    return prompt, _count(usage.get("output_tokens"))


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _event_has_content(event: dict[str, Any]) -> bool:
    delta = event.get("delta")
    if isinstance(delta, str):  # Responses: the delta is the text itself
        return bool(delta)
    if isinstance(delta, dict):  # Messages: text_delta, input_json_delta, thinking_delta
        for key in _DELTA_KEYS:
            if delta.get(key):
                return True
    return False


def split_frames(data: bytes) -> list[tuple[bytes, bytes]]:
    """Whole frames (as the meter forwards them) as (frame, its separator); a trailing part without one
    comes last with an empty separator."""
    buf = bytearray(data)
    frames: list[tuple[bytes, bytes]] = []
    start = 0
    while (found := _boundary(buf, start))[0] >= 0:
        end, sep = found
        frames.append((bytes(buf[start:end]), bytes(buf[end : end + sep])))
        start = end + sep
    if start < len(buf):
        frames.append((bytes(buf[start:]), b""))
    return frames


def _boundary(buf: bytearray, start: int) -> tuple[int, int]:
    """(index, length) of the next frame separator at or after `start`, or (-1, 0)."""
    lf = buf.find(b"\n\n", start)
    crlf = buf.find(b"\r\n\r\n", start, lf + 2 if lf >= 0 else len(buf))
    if crlf >= 0 and (lf < 0 or crlf < lf):
        return crlf, 4
    return (lf, 2) if lf >= 0 else (-1, 0)


def frame_data(frame: bytes) -> bytes | None:
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
    for choice in choices:  # noqa: SIM110 - a plain loop, as in _has_content: it runs for every frame
        if isinstance(choice, dict) and choice.get("finish_reason"):
            return True
    return False
