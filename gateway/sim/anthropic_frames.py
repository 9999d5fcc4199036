"""The Anthropic Messages shapes of each engine: the whole message and its event stream.

Sources: llama.cpp `tools/server/server-task.cpp` (`to_json_anthropic`, `to_json_anthropic_stream`,
the partial result's `to_json_anthropic`), vLLM `entrypoints/anthropic/serving_messages.py`
(`messages_full_converter`, `message_stream_converter`); SGLang's adapter follows vLLM's.

- llama.cpp sends `message_start` with the first token (headers go out only then), keeps every block
  open until the end and closes them in order, ends a thinking block with an empty `signature_delta`,
  counts `cache_read_input_tokens`, and omits an empty text block.
- vLLM sends `message_start` on its role chunk (before the first token), closes a block when the next
  one starts, puts input and output tokens on `message_delta`, always has a text block in a whole
  message, and ends the stream with `data: [DONE]` after `message_stop`.
Neither sends `ping`.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.sim.flavors.base import Piece
from gateway.sim.flavors.request import ApiError, RequestPlan
from gateway.sim.generation import output_of

JSON = dict[str, Any]
_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
_ERRORS = {400: "invalid_request_error", 404: "not_found_error", 503: "overloaded_error"}


def event(name: str, data: JSON) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class MessagesFrames:
    def __init__(self, plan: RequestPlan, flavor: str) -> None:
        self.plan = plan
        self.llama = flavor == "llamacpp"
        self._started = False
        self._open: list[tuple[str, int]] = []  # (kind, index) of the open blocks
        self._blocks = 0

    # --- whole message ----------------------------------------------------------------------------
    def whole(self, tokens: int) -> JSON:
        plan, out = self.plan, output_of(self.plan, tokens)
        content: list[JSON] = []
        if out.reasoning:
            content.append({"type": "thinking", "thinking": out.reasoning, "signature": ""})
        if out.content or not self.llama:
            content.append({"type": "text", "text": out.content})
        if out.tool is not None:
            arguments = orjson.loads(out.tool.arguments) if plan.finish_reason == "tool_calls" else {}
            content.append({"type": "tool_use", "id": out.tool.id, "name": out.tool.name, "input": arguments})
        body: JSON = {
            "id": plan.request_id,
            "type": "message",
            "role": "assistant",
            "content": content,
            "model": plan.response_model,
            "stop_reason": _STOP[plan.finish_reason],
            "stop_sequence": None,
            "usage": self._usage(tokens),
        }
        return body

    def _usage(self, output_tokens: int) -> JSON:
        if self.llama:
            prompt = self.plan.prompt.tokens
            return {"cache_read_input_tokens": 0, "input_tokens": prompt, "output_tokens": output_tokens}
        return {"input_tokens": self.plan.prompt.tokens, "output_tokens": output_tokens}

    # --- stream -----------------------------------------------------------------------------------
    def start(self) -> list[bytes]:
        return [] if self.llama else self._message_start()

    def pieces(self, pieces: list[Piece]) -> list[bytes]:
        out = self._message_start()
        for piece in pieces:
            if piece.reasoning:
                out += self._open_block("thinking", {"type": "thinking", "thinking": ""})
                out.append(self._delta({"type": "thinking_delta", "thinking": piece.reasoning}))
            if piece.content:
                out += self._open_block("text", {"type": "text", "text": ""})
                out.append(self._delta({"type": "text_delta", "text": piece.content}))
            if piece.tool is not None and piece.tool.id is not None:
                block: JSON = {"type": "tool_use", "id": piece.tool.id, "name": piece.tool.name, "input": {}}
                out += self._open_block("tool_use", block)
            if piece.tool is not None and piece.tool.arguments:
                out.append(self._delta({"type": "input_json_delta", "partial_json": piece.tool.arguments}))
        return out

    def finish(self, tokens: int) -> list[bytes]:
        out = self._message_start()
        out += self._close(len(self._open))
        usage = self._usage(tokens) if not self.llama else {"output_tokens": tokens}
        delta = {"stop_reason": _STOP[self.plan.finish_reason], "stop_sequence": None}
        out.append(event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        out.append(event("message_stop", {"type": "message_stop"}))
        if not self.llama:
            out.append(b"data: [DONE]\n\n")
        return out

    def error(self, err: ApiError) -> list[bytes]:
        error = {"type": _ERRORS.get(err.status, "api_error"), "message": err.message}
        out = [event("error", {"type": "error", "error": error})]
        return out if self.llama else [*out, b"data: [DONE]\n\n"]

    def _message_start(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        message: JSON = {
            "id": self.plan.request_id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.plan.response_model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self._usage(0),
        }
        return [event("message_start", {"type": "message_start", "message": message})]

    def _open_block(self, kind: str, block: JSON) -> list[bytes]:
        if self._open and self._open[-1][0] == kind:
            return []
        # vLLM closes the open block when another starts; llama.cpp closes them all at the end.
        out = [] if self.llama else self._close(len(self._open))
        self._open.append((kind, self._blocks))
        self._blocks += 1
        start = {"type": "content_block_start", "index": self._blocks - 1, "content_block": block}
        return [*out, event("content_block_start", start)]

    def _delta(self, delta: JSON) -> bytes:
        data = {"type": "content_block_delta", "index": self._open[-1][1], "delta": delta}
        return event("content_block_delta", data)

    def _close(self, count: int) -> list[bytes]:
        out: list[bytes] = []
        for kind, index in self._open[:count]:
            if kind == "thinking" and self.llama:
                delta = {"type": "signature_delta", "signature": ""}
                data = {"type": "content_block_delta", "index": index, "delta": delta}
                out.append(event("content_block_delta", data))
            out.append(event("content_block_stop", {"type": "content_block_stop", "index": index}))
        del self._open[:count]
        return out
