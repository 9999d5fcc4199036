"""The agent APIs each engine serves besides chat: Anthropic Messages and OpenAI Responses.

Both are served the way vLLM and llama.cpp serve them: the body becomes a chat request
(gateway/sim/agent_request.py), the flavor plans it (its own checks, errors and context limits), and
the engine generates it step by step exactly as chat; only the framing differs
(gateway/sim/anthropic_frames.py, responses_frames.py). So TTFT and inter-token timing are the same in
every shape. Responses are stored (bounded, per engine process) for GET and `previous_response_id`: a
follow-up sent to an engine that did not answer the first turn fails as that engine fails it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from gateway.sim.agent_request import messages_chat_body, responses_chat_body
from gateway.sim.anthropic_frames import MessagesFrames
from gateway.sim.flavors.base import Handler, Piece
from gateway.sim.flavors.request import ApiError, RequestPlan, parse_request
from gateway.sim.generation import output_of, pieces
from gateway.sim.http import error_response, event_stream, groups, json_response, read_body
from gateway.sim.responses_frames import ResponsesFrames

if TYPE_CHECKING:
    from gateway.sim.engine import RequestRun, SimEngine

JSON = dict[str, Any]
STORED_RESPONSES = 1024  # per engine process: the oldest is forgotten first


class Frames(Protocol):
    def whole(self, tokens: int) -> JSON: ...
    def start(self) -> list[bytes]: ...
    def pieces(self, pieces: list[Piece]) -> list[bytes]: ...
    def finish(self, tokens: int) -> list[bytes]: ...
    def error(self, err: ApiError) -> list[bytes]: ...


class ResponseStore:
    """Finished responses by id, with the conversation a follow-up continues."""

    def __init__(self, capacity: int = STORED_RESPONSES) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, tuple[JSON, list[JSON]]] = OrderedDict()

    def put(self, response: JSON, conversation: list[JSON]) -> None:
        self._items[response["id"]] = (response, conversation)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def get(self, response_id: str) -> tuple[JSON, list[JSON]] | None:
        return self._items.get(response_id)


def agent_routes(engine: SimEngine) -> list[tuple[str, str, Handler]]:
    flavor = engine.flavor.name
    store = ResponseStore()

    async def messages(request: web.Request) -> web.StreamResponse:
        return await _generate(
            engine, request, messages_chat_body, lambda plan, _: MessagesFrames(plan, flavor)
        )

    async def responses(request: web.Request) -> web.StreamResponse:
        return await _responses(engine, store, request)

    async def get_response(request: web.Request) -> web.StreamResponse:
        response_id = request.match_info["response_id"]
        stored = store.get(response_id)
        if stored is None:
            return error_response(engine.flavor, not_found(response_id))
        return json_response(stored[0])

    async def cancel_response(request: web.Request) -> web.StreamResponse:
        # Only background responses can be cancelled; the twin answers every request in the foreground.
        response_id = request.match_info["response_id"]
        if store.get(response_id) is None:
            return error_response(engine.flavor, not_found(response_id))
        return error_response(engine.flavor, ApiError(400, "Cannot cancel a synchronous response."))

    routes: list[tuple[str, str, Handler]] = [
        ("POST", "/v1/messages", messages),
        ("POST", "/v1/responses", responses),
    ]
    if flavor == "llamacpp":  # llama-server stores nothing: no GET, and `/responses` is an alias
        return [*routes, ("POST", "/responses", responses)]
    return [
        *routes,
        ("GET", "/v1/responses/{response_id}", get_response),
        ("POST", "/v1/responses/{response_id}/cancel", cancel_response),
    ]


def not_found(response_id: str) -> ApiError:
    # vLLM and SGLang (serving_responses.py `_make_not_found_error`): 404, type invalid_request_error.
    return ApiError(404, f"Response with id '{response_id}' not found.", "not_found", param="response_id")


async def _responses(engine: SimEngine, store: ResponseStore, request: web.Request) -> web.StreamResponse:
    frames: list[ResponsesFrames] = []
    history: list[JSON] = []

    def to_chat(body: Any) -> JSON:
        previous = body.get("previous_response_id") if isinstance(body, dict) else None
        if previous is not None:
            if engine.flavor.name == "llamacpp":
                raise ApiError(400, "previous_response_id is not supported", param="previous_response_id")
            stored = store.get(str(previous))
            if stored is None:
                raise not_found(str(previous))
            history.extend(stored[1])
        return responses_chat_body(body, history)

    def make(plan: RequestPlan, body: JSON) -> ResponsesFrames:
        frames.append(ResponsesFrames(plan, engine.flavor.name, body))
        return frames[0]

    def done(plan: RequestPlan, tokens: int) -> None:
        if engine.flavor.name != "llamacpp" and frames:
            conversation: list[JSON] = [*map(dict, plan.request.messages), _assistant_turn(plan, tokens)]
            store.put(frames[0].whole(tokens), [m for m in conversation if m.get("role") != "system"])

    return await _generate(engine, request, to_chat, make, done)


def _assistant_turn(plan: RequestPlan, tokens: int) -> JSON:
    out = output_of(plan, tokens)
    if out.tool is None:
        return {"role": "assistant", "content": out.content}
    function = {"name": out.tool.name, "arguments": out.tool.arguments}
    return {"role": "assistant", "content": None, "tool_calls": [{"id": out.tool.id, "function": function}]}


async def _generate(
    engine: SimEngine,
    request: web.Request,
    to_chat: Callable[[Any], JSON],
    make_frames: Callable[[RequestPlan, JSON], Frames],
    on_done: Callable[[RequestPlan, int], None] | None = None,
) -> web.StreamResponse:
    flavor = engine.flavor
    try:
        body = await read_body(flavor, request)
        chat = to_chat(body)
        plan = flavor.plan(parse_request("chat", chat), engine.spec, engine.rng)
    except ApiError as err:
        return error_response(flavor, err)
    if engine.should_fail():
        engine.observed.errors_total += 1
        return error_response(flavor, flavor.fault_error())
    assert isinstance(body, dict)
    frames = make_frames(plan, body)
    run = engine.run(plan)
    if plan.request.stream:
        return await _stream(engine, plan, run, frames, request, on_done)
    summary = await run.to_end()
    if on_done is not None:
        on_done(plan, summary.completion_tokens)
    return json_response(frames.whole(summary.completion_tokens))


async def _stream(
    engine: SimEngine,
    plan: RequestPlan,
    run: RequestRun,
    frames: Frames,
    request: web.Request,
    on_done: Callable[[RequestPlan, int], None] | None,
) -> web.StreamResponse:
    response = event_stream()
    fail_after_first = engine.should_fail_stream()
    per_token = engine.flavor.chunk_per_token
    try:
        await response.prepare(request)
        await response.write(b"".join(frames.start()))
        emitted = 0
        async with contextlib.aclosing(run.steps_of()) as steps:
            async for produced in steps:
                out: list[bytes] = []
                for start, count in groups(emitted, produced, per_token):
                    out.extend(frames.pieces(pieces(plan, start, count)))
                emitted += produced
                await response.write(b"".join(out))
                if fail_after_first:
                    break
        if fail_after_first and emitted < plan.completion_tokens:
            run.finish("error")
            await response.write(b"".join(frames.error(engine.flavor.fault_error())))
            return response
        summary = run.finish(plan.finish_reason)
        if on_done is not None:
            on_done(plan, summary.completion_tokens)
        await response.write(b"".join(frames.finish(summary.completion_tokens)))
    except asyncio.CancelledError:
        run.finish("abort")
        raise
    except ConnectionResetError:
        run.finish("abort")
    return response
