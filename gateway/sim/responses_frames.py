"""The OpenAI Responses shapes of each engine: the response object and its event stream.

Sources: vLLM `entrypoints/openai/serving_responses.py` (0.11; `responses/serving.py` in 0.33) and its
`ResponsesResponse` protocol model; llama.cpp `tools/server/server-task.cpp`
(`to_json_oaicompat_resp`, `to_json_oaicompat_resp_stream`, the partial `to_json_oaicompat_resp`).

Stream order: `response.created`, `response.in_progress`, then per output item
`response.output_item.added` (+ `response.content_part.added` for a message), its deltas
(`response.reasoning_text.delta`, `response.output_text.delta`, `response.function_call_arguments.delta`),
its done events, then `response.completed` with the whole response. vLLM numbers every event
(`sequence_number`) and sends the full response object in created/in_progress; llama.cpp sends neither
number nor the full object before `response.completed`, and sends created/in_progress with the first
token.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import orjson

from gateway.sim.flavors.base import Piece
from gateway.sim.flavors.request import ApiError, RequestPlan
from gateway.sim.generation import Output, output_of

JSON = dict[str, Any]


def event(data: JSON) -> bytes:
    return b"event: " + str(data["type"]).encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class ResponsesFrames:
    def __init__(self, plan: RequestPlan, flavor: str, body: JSON) -> None:
        self.plan = plan
        self.llama = flavor == "llamacpp"
        self.body = body  # the request, echoed in vLLM's response object
        self.id = "resp_" + secrets.token_hex(16)
        self.created = int(time.time())
        self._ids = {"reasoning": "rs_" + secrets.token_hex(16), "message": "msg_" + secrets.token_hex(16)}
        self._sequence = 0
        self._started = False
        self._kinds: list[str] = []  # output items started so far, in order
        self._texts: list[str] = []  # their text so far
        self._done_items: list[JSON] = []  # the finished ones

    # --- whole response ---------------------------------------------------------------------------
    def whole(self, tokens: int) -> JSON:
        return self._response("completed", self._output(output_of(self.plan, tokens)), tokens)

    def _output(self, out: Output) -> list[JSON]:
        items: list[JSON] = []
        if out.reasoning:
            items.append(self._item("reasoning", out.reasoning, "completed"))
        if out.content:
            items.append(self._item("message", out.content, "completed"))
        if out.tool is not None:
            items.append(self._function_call(out.tool.arguments, "completed"))
        return items

    def _item(self, kind: str, text: str, status: str) -> JSON:
        if kind == "reasoning":
            content = [{"text": text, "type": "reasoning_text"}] if text else []
            return {
                "id": self._ids["reasoning"],
                "summary": [],
                "type": "reasoning",
                "content": content,
                "encrypted_content": None,
                "status": status,
            }
        parts = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}] if text else []
        return {
            "id": self._ids["message"],
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": parts,
        }

    def _function_call(self, arguments: str, status: str) -> JSON:
        call = self.plan.tool_call
        assert call is not None
        return {
            "id": self._item_id("function_call"),
            "type": "function_call",
            "status": status,
            "arguments": arguments,
            "call_id": call.id,
            "name": call.name,
        }

    def _response(self, status: str, output: list[JSON], tokens: int) -> JSON:
        plan, body = self.plan, self.body
        incomplete = status == "completed" and plan.finish_reason == "length"
        usage = {
            "input_tokens": plan.prompt.tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": tokens,
            "output_tokens_details": {"reasoning_tokens": min(plan.reasoning_tokens, tokens)},
            "total_tokens": plan.prompt.tokens + tokens,
        }
        if self.llama:
            return {
                "completed_at": int(time.time()),
                "created_at": self.created,
                "id": self.id,
                "model": plan.response_model,
                "object": "response",
                "output": output,
                "status": status,
                "usage": usage,
            }
        return {
            "id": self.id,
            "created_at": self.created,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": body.get("instructions"),
            "metadata": body.get("metadata"),
            "model": plan.response_model,
            "object": "response",
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "temperature": body.get("temperature"),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p"),
            "background": False,
            "max_output_tokens": body.get("max_output_tokens"),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": body.get("reasoning"),
            "status": "incomplete" if incomplete else status,
            "text": body.get("text"),
            "truncation": body.get("truncation", "disabled"),
            "usage": usage if status != "in_progress" else None,
            "user": body.get("user"),
        }

    # --- stream -----------------------------------------------------------------------------------
    def start(self) -> list[bytes]:
        return [] if self.llama else self._created()

    def pieces(self, pieces: list[Piece]) -> list[bytes]:
        out = self._created()
        for piece in pieces:
            if piece.reasoning:
                out += self._added("reasoning")
                out.append(
                    self._event("response.reasoning_text.delta", content_index=0, delta=piece.reasoning)
                )
                self._texts[-1] += piece.reasoning
            if piece.content:
                out += self._added("message")
                out.append(
                    self._event(
                        "response.output_text.delta", content_index=0, delta=piece.content, logprobs=[]
                    )
                )
                self._texts[-1] += piece.content
            if piece.tool is not None and piece.tool.id is not None:
                out += self._added("function_call")
            if piece.tool is not None and piece.tool.arguments:
                out.append(self._event("response.function_call_arguments.delta", delta=piece.tool.arguments))
                self._texts[-1] += piece.tool.arguments
        return out

    def finish(self, tokens: int) -> list[bytes]:
        out = self._created() + self._close_item()
        response = self._response("completed", self._done_items, tokens)
        return [*out, self._raw({"type": "response.completed", "response": response})]

    def error(self, err: ApiError) -> list[bytes]:
        return [self._raw({"type": "error", "code": str(err.status), "message": err.message, "param": None})]

    def _created(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        if self.llama:
            response: JSON = {"id": self.id, "object": "response", "status": "in_progress"}
        else:
            response = self._response("in_progress", [], 0)
        kinds = ("response.created", "response.in_progress")
        return [self._raw({"type": kind, "response": response}) for kind in kinds]

    def _added(self, kind: str) -> list[bytes]:
        """Start an output item of `kind` unless it is the current one; the previous one is done first."""
        if self._kinds and self._kinds[-1] == kind and len(self._done_items) < len(self._kinds):
            return []
        out = self._close_item()
        if kind == "function_call":
            item = self._function_call("", "in_progress")
        else:
            item = self._item(kind, "", "in_progress")
        self._kinds.append(kind)
        self._texts.append("")
        out.append(self._event("response.output_item.added", item=item))
        if kind == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out.append(self._event("response.content_part.added", content_index=0, part=part))
        return out

    def _close_item(self) -> list[bytes]:
        if len(self._done_items) == len(self._kinds):
            return []
        kind, text = self._kinds[-1], self._texts[-1]
        if kind == "function_call":
            item = self._function_call(text, "completed")
            events = [self._event("response.function_call_arguments.done", arguments=text)]
        elif kind == "reasoning":
            item = self._item(kind, text, "completed")
            events = [self._event("response.reasoning_text.done", content_index=0, text=text)]
        else:
            item = self._item(kind, text, "completed")
            events = [
                self._event("response.output_text.done", content_index=0, text=text, logprobs=[]),
                self._event("response.content_part.done", content_index=0, part=item["content"][0]),
            ]
        self._done_items.append(item)
        return [*events, self._event("response.output_item.done", item=item)]

    def _event(self, kind: str, **fields: Any) -> bytes:
        index = len(self._kinds) - 1
        data: JSON = {"type": kind}
        if "item" not in fields:
            data["item_id"] = self._item_id(self._kinds[index])
        data["output_index"] = index
        data.update(fields)
        return self._raw(data)

    def _item_id(self, kind: str) -> str:
        if kind == "function_call":
            assert self.plan.tool_call is not None
            return "fc_" + self.plan.tool_call.id
        return self._ids[kind]

    def _raw(self, data: JSON) -> bytes:
        if not self.llama:
            data["sequence_number"] = self._sequence
            self._sequence += 1
        return event(data)
