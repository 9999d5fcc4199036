"""The agent APIs through the gateway, in-process (httpx over ASGI, engines played by a MockTransport):
Messages natively or translated to chat, Responses pinned to the backend that stored the previous
response, capability refusals, failover before the first content of an Anthropic stream, x-api-key."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.api.auth import hash_key
from gateway.api.response_ids import ResponseIds, find_response_id
from gateway.app import Gateway, build_app, build_gateway
from gateway.backends.registry import Status
from gateway.proxy.upstream import MockResponse, MockTransport, UpstreamBroken
from gateway.records import RequestRecord
from gateway.settings import Settings

MESSAGES = {
    "model": "m",
    "max_tokens": 64,
    "system": "You are terse.",
    "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hi."}]}],
}
CHAT_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
}
ANTHROPIC_ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "content": [{"type": "text", "text": "hi"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 12, "output_tokens": 1},
}


def event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def anthropic_stream(words: int = 3) -> list[bytes]:
    start = {
        "type": "message_start",
        "message": {"id": "msg_1", "usage": {"input_tokens": 12, "output_tokens": 0}},
    }
    frames = [event("message_start", start)]
    frames.append(event("content_block_start", {"type": "content_block_start", "index": 0,
                                                "content_block": {"type": "text", "text": ""}}))  # fmt: skip
    for i in range(words):
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f"w{i} "}}
        frames.append(event("content_block_delta", delta))
    frames.append(event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    usage = {"output_tokens": words}
    frames.append(event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                          "usage": usage}))  # fmt: skip
    frames.append(event("message_stop", {"type": "message_stop"}))
    return frames


def chat_stream(words: int = 3) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return (
            b"data: "
            + orjson.dumps({"id": "c1", "object": "chat.completion.chunk", "choices": [choice]})
            + b"\n\n"
        )

    frames = [chunk({"role": "assistant", "content": ""})]
    frames += [chunk({"content": f"w{i} "}) for i in range(words)]
    frames.append(chunk({}, "stop"))
    usage = {"prompt_tokens": 12, "completion_tokens": words, "total_tokens": 12 + words}
    frames.append(b"data: " + orjson.dumps({"id": "c1", "choices": [], "usage": usage}) + b"\n\n")
    return [*frames, b"data: [DONE]\n\n"]


class Engines:
    """Answers like the engine each backend is, by path; notes every request it is sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict[str, Any]]] = []  # (backend, path, body)
        self.broken_before_content: set[str] = set()
        self.broken_after_content: set[str] = set()
        self.stored: dict[str, str] = {}

    async def handle(self, url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        backend, path = url.removeprefix("http://").split("/", 1)
        path = "/" + path
        parsed = orjson.loads(body)
        self.sent.append((backend, path, parsed))
        stream = parsed.get("stream") is True
        sse = "text/event-stream"
        if path == "/v1/messages":
            if stream:
                frames = anthropic_stream()
                if backend in self.broken_before_content:
                    return MockResponse(200, _break_after(frames[:2]), sse)
                if backend in self.broken_after_content:
                    return MockResponse(200, _break_after(frames[:3]), sse)
                return MockResponse(200, frames, sse)
            return MockResponse(200, [orjson.dumps(ANTHROPIC_ANSWER)])
        if path == "/v1/chat/completions":
            return (
                MockResponse(200, chat_stream(), sse)
                if stream
                else MockResponse(200, [orjson.dumps(CHAT_ANSWER)])
            )
        if path == "/v1/responses":
            response_id = f"resp_{backend}{len(self.sent)}"
            self.stored[response_id] = backend
            answer = {"id": response_id, "object": "response", "status": "completed",
                      "usage": {"input_tokens": 5, "output_tokens": 2}}  # fmt: skip
            return MockResponse(200, [orjson.dumps(answer)])
        return MockResponse(200, [orjson.dumps({"object": "list", "data": [], "path": path})])

    async def get(self, url: str, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
        backend, path = url.removeprefix("http://").split("/", 1)
        response_id = path.rsplit("/", 1)[-1]
        if self.stored.get(response_id) != backend:
            return 404, b'{"error": {"message": "not found"}}'
        return 200, orjson.dumps({"id": response_id, "object": "response", "held_by": backend})


def _break_after(frames: list[bytes]) -> Iterator[bytes]:
    yield from frames
    raise UpstreamBroken("the engine died")


def settings(flavors: dict[str, str], **extra: Any) -> Settings:
    backends = [{"name": name, "url": f"http://{name}", "flavor": flavor} for name, flavor in flavors.items()]
    for backend in backends:
        backend.update(extra.pop(f"backend_{backend['name']}", {}))
    data: dict[str, Any] = {"backends": backends, "pools": [{"model": "m", "backends": list(flavors)}]}
    return Settings(**data, **extra)


@pytest.fixture
def engines() -> Engines:
    return Engines()


async def client_for(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    for name in gateway.registry.backends:
        gateway.registry.set_status(name, Status.READY)
    app = build_app(gateway)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as http:
        yield http


def gateway_for(engines: Engines, s: Settings, records: list[RequestRecord] | None = None) -> Gateway:
    transport = MockTransport(engines.handle, engines.get)
    observers = [records.append] if records is not None else []
    return build_gateway(s, transport=transport, observers=observers)


async def test_messages_reach_a_native_backend_as_the_client_sent_them(engines: Engines) -> None:
    gateway = gateway_for(engines, settings({"v": "vllm"}))
    async for http in client_for(gateway):
        answer = await http.post("/v1/messages", json=MESSAGES)
    assert answer.status_code == 200 and answer.json()["type"] == "message"
    assert engines.sent == [("v", "/v1/messages", MESSAGES)]


async def test_messages_are_translated_to_chat_for_a_backend_without_them(engines: Engines) -> None:
    records: list[RequestRecord] = []
    gateway = gateway_for(engines, settings({"s": "sglang"}), records)
    async for http in client_for(gateway):
        answer = await http.post("/v1/messages", json=MESSAGES)
    backend, path, sent = engines.sent[0]
    assert (backend, path) == ("s", "/v1/chat/completions")
    assert sent["messages"][0] == {"role": "system", "content": "You are terse."}
    body = answer.json()
    assert body["type"] == "message" and body["content"] == [{"type": "text", "text": "hi"}]
    assert body["usage"]["input_tokens"] == 12 and body["model"] == "m"
    assert records[0].endpoint == "messages" and records[0].prompt_tokens == 12


async def test_a_translated_stream_is_anthropic_events_measured_like_chat(engines: Engines) -> None:
    records: list[RequestRecord] = []
    gateway = gateway_for(engines, settings({"s": "sglang"}), records)
    async for http in client_for(gateway):
        answer = await http.post("/v1/messages", json={**MESSAGES, "stream": True})
    names = [line[7:] for line in answer.text.splitlines() if line.startswith("event: ")]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert names.count("content_block_delta") == 3
    assert "[DONE]" not in answer.text
    assert records[0].ttft is not None and len(records[0].itl) == 2 and records[0].output_tokens == 3


async def test_a_native_anthropic_stream_is_measured(engines: Engines) -> None:
    records: list[RequestRecord] = []
    gateway = gateway_for(engines, settings({"v": "vllm"}), records)
    async for http in client_for(gateway):
        answer = await http.post("/v1/messages", json={**MESSAGES, "stream": True})
    assert answer.text.encode() == b"".join(anthropic_stream())
    record = records[0]
    assert record.ttft is not None and len(record.itl) == 2
    assert (record.prompt_tokens, record.output_tokens) == (12, 3)


async def test_an_anthropic_stream_dying_before_content_fails_over(engines: Engines) -> None:
    engines.broken_before_content.add("a")
    records: list[RequestRecord] = []
    gateway = gateway_for(engines, settings({"a": "vllm", "b": "vllm"}), records)
    async for http in client_for(gateway):
        answer = await http.post("/v1/messages", json={**MESSAGES, "stream": True})
    assert answer.headers["x-gateway-backend"] == "b"
    assert answer.text.encode() == b"".join(anthropic_stream())  # one clean stream, nothing of a's
    assert [b for b, _, _ in engines.sent] == ["a", "b"] and records[0].attempts == 2


async def test_a_messages_stream_broken_mid_way_ends_with_an_anthropic_error_event(engines: Engines) -> None:
    engines.broken_after_content.add("v")
    gateway = gateway_for(engines, settings({"v": "vllm"}))
    async for http in client_for(gateway):
        answer = await http.post("/v1/messages", json={**MESSAGES, "stream": True})
    last = answer.text.rstrip("\n").split("\n\n")[-1]
    assert last.startswith("event: error\ndata: ")
    error = orjson.loads(last.split("data: ", 1)[1])
    assert error["type"] == "error" and "mid-stream" in error["error"]["message"]
    assert "[DONE]" not in answer.text


async def test_an_api_no_backend_serves_is_a_400_naming_it(engines: Engines) -> None:
    s = settings({"p": "openai"}, backend_p={"translate_messages": False})
    gateway = gateway_for(engines, s)
    async for http in client_for(gateway):
        responses = await http.post("/v1/responses", json={"model": "m", "input": "hi"})
        messages = await http.post("/v1/messages", json=MESSAGES)
    assert responses.status_code == 400 and "/v1/responses" in responses.json()["error"]["message"]
    assert messages.status_code == 400
    error = messages.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "/v1/messages" in error["error"]["message"]
    assert engines.sent == []


async def test_declared_endpoints_override_the_flavor(engines: Engines) -> None:
    s = settings({"s": "sglang"}, backend_s={"endpoints": ["chat", "messages"]})
    gateway = gateway_for(engines, s)
    async for http in client_for(gateway):
        await http.post("/v1/messages", json=MESSAGES)
        embeddings = await http.post("/v1/embeddings", json={"model": "m", "input": "x"})
    assert engines.sent[0][1] == "/v1/messages"  # declared native: no translation
    assert embeddings.status_code == 400


async def test_a_follow_up_reaches_the_backend_that_stored_its_previous_response(engines: Engines) -> None:
    gateway = gateway_for(engines, settings({"a": "vllm", "b": "vllm"}))
    async for http in client_for(gateway):
        gateway.registry.set_status("a", Status.DEAD)  # the first response is made on b
        first = (await http.post("/v1/responses", json={"model": "m", "input": "hi"})).json()["id"]
        gateway.registry.set_status("a", Status.READY)  # a is back, idle, and first in the pool
        follow = {"model": "m", "input": "more", "previous_response_id": first}
        answers = [await http.post("/v1/responses", json=follow) for _ in range(3)]
        fresh = await http.post("/v1/responses", json={"model": "m", "input": "new"})
        stored = await http.get(f"/v1/responses/{first}")
    assert {a.headers["x-gateway-backend"] for a in answers} == {"b"}
    assert fresh.headers["x-gateway-backend"] == "a"  # only follow-ups are pinned
    assert stored.status_code == 200 and stored.json()["held_by"] == "b"


async def test_an_unknown_response_id_is_a_404(engines: Engines) -> None:
    gateway = gateway_for(engines, settings({"a": "vllm"}))
    async for http in client_for(gateway):
        missing = await http.get("/v1/responses/resp_nowhere")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "response_not_found"


@pytest.mark.parametrize(
    ("path", "body", "upstream"),
    [
        ("/v1/embeddings", {"model": "m", "input": ["a", "b"]}, "/v1/embeddings"),
        ("/rerank", {"model": "m", "query": "q", "documents": ["d"]}, "/v1/rerank"),
        ("/v1/reranking", {"model": "m", "query": "q", "documents": ["d"]}, "/v1/rerank"),
        ("/tokenize", {"prompt": "hello"}, "/tokenize"),
        ("/detokenize", {"model": "m", "tokens": [1, 2]}, "/detokenize"),
        (
            "/v1/messages/count_tokens",
            {"model": "m", "messages": MESSAGES["messages"]},
            "/v1/messages/count_tokens",
        ),
    ],
)
async def test_the_other_apis_pass_through_to_their_engine_path(
    engines: Engines, path: str, body: dict[str, Any], upstream: str
) -> None:
    gateway = gateway_for(engines, settings({"l": "llamacpp"}))
    async for http in client_for(gateway):
        answer = await http.post(path, json=body)
    assert answer.status_code == 200
    assert engines.sent[0][1] == upstream and engines.sent[0][2]["model"] == "m"


async def test_a_missing_required_field_is_a_400_naming_it(engines: Engines) -> None:
    gateway = gateway_for(engines, settings({"l": "llamacpp"}))
    async for http in client_for(gateway):
        answer = await http.post("/v1/embeddings", json={"model": "m"})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "input"


async def test_anthropic_clients_authenticate_with_x_api_key(engines: Engines) -> None:
    s = settings({"v": "vllm"}, auth={"client_key_hashes": [hash_key("sk-agent")]})
    gateway = gateway_for(engines, s)
    async for http in client_for(gateway):
        keyed = await http.post("/v1/messages", json=MESSAGES, headers={"x-api-key": "sk-agent"})
        wrong = await http.post("/v1/messages", json=MESSAGES, headers={"x-api-key": "sk-other"})
        none = await http.post("/v1/messages", json=MESSAGES)
    assert keyed.status_code == 200
    assert wrong.status_code == 401 and none.status_code == 401


def test_response_ids_survive_a_restart_and_stay_bounded(tmp_path: Path) -> None:
    ids = ResponseIds(tmp_path, max_ids=3)
    for i in range(5):
        ids.remember(f"resp_{i}", f"b{i}")
    ids.save()
    again = ResponseIds(tmp_path, max_ids=3)
    assert again.load() == 3
    assert again.backend("resp_4") == "b4" and again.backend("resp_0") is None


def test_the_response_id_is_found_in_a_whole_answer_and_a_stream_head() -> None:
    assert find_response_id(b'{"id": "resp_abc", "object": "response"}') == "resp_abc"
    created = b'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_9"}}\n\n'
    assert find_response_id(created) == "resp_9"
    assert find_response_id(b'{"id": "msg_1"}') is None
