"""Resuming a stream its engine broke mid-answer: the rest of the answer from another engine of the model.

Before the first content a failed stream is simply tried elsewhere (proxy/relay.py holds it back). After
content has gone out the client's 200 and the first part of its answer cannot be taken back, and until
now the stream ended with an error frame: a long answer lost to an engine crash or hang near its end.
Engines of one pool serve the same model, so another can write the rest: it is sent the request with the
text the client already has as the start of the answer (a chat's last assistant message continued,
`continue_final_message`, vLLM's and SGLang's flag, a prefill for llama.cpp; a completion's prompt
extended by it), its token limits reduced by what was generated, and its frames are spliced into the
client's stream: its role frame dropped, each frame given the first stream's `id`, `created` and `model`,
its usage counted as one answer (prompt tokens as the client sent them, completion tokens in all).

Only what can be continued faithfully is: chat or completions, one choice, plain text so far (no tool
call, no reasoning), no structured output or completion `suffix`/`echo` (a grammar or an edit would
restart from the prefill), and a stream that has not finished. The text's token count comes from the
continuing engine's own tokenizer (`/tokenize`); an engine that cannot tell is not asked to continue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.proxy.stream import frame_data, split_frames
from gateway.proxy.upstream import UpstreamError, UpstreamTransport
from gateway.records import RequestRecord
from gateway.settings import BackendConfig

# Request fields under which a continuation would not be the rest of the same answer: a grammar or schema
# restarts at the prefill, `suffix` and `echo` change what the text is, n > 1 has several answers.
_UNRESUMABLE_KEYS = (
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "structured_outputs",
    "json_schema",
    "grammar",
    "suffix",
)
# Delta keys that are not plain answer text: the continuation's prefill could not carry them.
_NOT_TEXT = ("tool_calls", "function_call", "reasoning", "reasoning_content")
# Token limits that count the generated tokens, reduced by what the client already has.
_LIMITS = ("max_tokens", "max_completion_tokens", "min_tokens")
# A tokenizer answers in milliseconds; one that takes longer is not one to continue the answer on.
TOKENIZE_S = 5.0


def resumable(endpoint: str, body: Mapping[str, Any], stream: bool) -> bool:
    """Whether a stream of this request could be continued on another engine if it broke mid-answer."""
    if not stream or endpoint not in ("chat", "completions"):
        return False
    if body.get("n") not in (None, 1) or body.get("best_of") not in (None, 1) or body.get("echo"):
        return False
    if any(body.get(key) is not None for key in _UNRESUMABLE_KEYS):
        return False
    response_format = body.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        return False
    if body.get("tool_choice") not in (None, "auto", "none"):  # a forced call: the answer is the call
        return False
    if endpoint == "completions":
        return isinstance(body.get("prompt"), str)
    return isinstance(body.get("messages"), list)


@dataclass(slots=True)
class Transcript:
    """What the client has been sent of the answer so far, read by the stream meter frame by frame
    (proxy/stream.py calls `take` for every frame with `choices`): the text, the first frame's `id`,
    `created` and `model`, whether it is still plain text and whether it finished."""

    chat: bool
    parts: list[str] = field(default_factory=list)
    head: dict[str, Any] = field(default_factory=dict)  # the first frame's id, created, model
    plain: bool = True
    finished: bool = False

    def take(self, event: Mapping[str, Any], choices: Any) -> None:
        if not self.head:
            self.head = {key: event[key] for key in ("id", "created", "model") if key in event}
        if not self.plain or not isinstance(choices, list):
            return
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                self.plain = False
                return
            if choice.get("finish_reason") is not None:
                self.finished = True
            text = self._text(choice)
            if text:
                self.parts.append(text)

    def _text(self, choice: Mapping[str, Any]) -> str | None:
        if not self.chat:
            text = choice.get("text")
            return text if isinstance(text, str) else None
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return None
        if any(delta.get(key) for key in _NOT_TEXT):
            self.plain = False
            return None
        text = delta.get("content")
        return text if isinstance(text, str) else None

    @property
    def text(self) -> str:
        return "".join(self.parts)


@dataclass(slots=True)
class Resume:
    """A request's resumable stream: its transcript, and once it broke (the request's record says where:
    `resumed_from`), how much had been generated."""

    transcript: Transcript
    generated: int = 0  # tokens of the transcript when the stream was last continued
    ttft: float | None = None  # the first stream's time to first content (the client's)

    def can_continue(self, answered: bool) -> bool:
        """Whether a break now can be continued elsewhere: content went out, all plain text, unfinished."""
        return answered and self.transcript.plain and not self.transcript.finished

    def body(
        self, base: Mapping[str, Any], endpoint: str, served: str, generated: int
    ) -> dict[str, Any] | None:
        """The continuation request for an engine serving the model as `served`, the transcript being
        `generated` tokens long by its tokenizer; None when the token limit leaves nothing to generate."""
        text = self.transcript.text
        body = dict(base, model=served)
        for key in _LIMITS:
            limit = body.get(key)
            if isinstance(limit, int) and not isinstance(limit, bool):
                left = limit - generated
                if left < 1 and key != "min_tokens":
                    return None
                body[key] = max(0, left)
        if endpoint == "completions":
            body["prompt"] = str(base["prompt"]) + text
        else:
            body["messages"] = [*base["messages"], {"role": "assistant", "content": text}]
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        return body

    def splice(self, data: bytes) -> bytes:
        """A continuation's frames as the client's stream goes on: its role frame dropped, the first
        stream's id, created and model, the usage counted as one answer."""
        out: list[bytes] = []
        for frame, separator in split_frames(data):
            rewritten = self._frame(frame)
            if rewritten is not None:
                out.append(rewritten + separator)
        return b"".join(out)

    def settle(self, record: RequestRecord) -> None:
        """The record of a continued stream counts one answer: the client's TTFT, every token generated."""
        record.ttft = self.ttft
        if record.output_tokens is not None:
            record.output_tokens += self.generated
        if record.prompt_tokens is not None:
            record.prompt_tokens = max(0, record.prompt_tokens - self.generated)

    def _frame(self, frame: bytes) -> bytes | None:
        payload = frame_data(frame)
        if payload is None or payload == b"[DONE]":
            return frame
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return frame
        if not isinstance(event, dict):
            return frame
        choices = event.get("choices")
        if isinstance(choices, list) and choices and all(_role_only(c) for c in choices):
            return None  # the continuation's own role frame: the client has had one
        event.update((key, value) for key, value in self.transcript.head.items() if key in event)
        usage = event.get("usage")
        if isinstance(usage, dict):
            event["usage"] = self._usage(usage)
        return b"data: " + orjson.dumps(event)

    def _usage(self, usage: dict[str, Any]) -> dict[str, Any]:
        fixed = dict(usage)
        prompt, completion = fixed.get("prompt_tokens"), fixed.get("completion_tokens")
        if isinstance(prompt, int) and not isinstance(prompt, bool):
            fixed["prompt_tokens"] = max(0, prompt - self.generated)
        if isinstance(completion, int) and not isinstance(completion, bool):
            fixed["completion_tokens"] = completion + self.generated
        return fixed


def _role_only(choice: Any) -> bool:
    """A chat frame that opens the assistant's turn and says nothing (vLLM's first frame)."""
    if not isinstance(choice, dict) or choice.get("finish_reason") is not None:
        return False
    delta = choice.get("delta")
    return isinstance(delta, dict) and "role" in delta and not any(v for k, v in delta.items() if k != "role")


async def count_tokens(
    transport: UpstreamTransport, config: BackendConfig, served: str, text: str
) -> int | None:
    """`text`'s length in tokens by the backend's own tokenizer (`/tokenize`); None if it cannot say."""
    body = orjson.dumps(tokenize_body(config.flavor, served, text))
    headers = {"content-type": "application/json", **config.auth_headers()}
    try:
        async with asyncio.timeout(TOKENIZE_S):
            response = await transport.send(config.url + "/tokenize", headers, body)
            try:
                return token_count(orjson.loads(await response.read())) if response.status == 200 else None
            finally:
                response.close()
    except (UpstreamError, TimeoutError, orjson.JSONDecodeError):
        return None


def tokenize_body(flavor: str, served: str, text: str) -> dict[str, Any]:
    """The `/tokenize` request counting `text` as an engine of `flavor` would generate it (no specials)."""
    if flavor == "llamacpp":
        return {"content": text, "add_special": False}
    return {"model": served, "prompt": text, "add_special_tokens": False}


def token_count(answer: Any) -> int | None:
    """The count in a `/tokenize` answer: vLLM's and SGLang's `count`, or llama.cpp's list of tokens."""
    if not isinstance(answer, dict):
        return None
    count = answer.get("count")
    if isinstance(count, int) and not isinstance(count, bool):
        return count
    tokens = answer.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None
