"""One request on its way through dispatch: the `Job` ingress hands over, the `Exchange` with its client
(the job, the record being filled, the client's `send`, whether the answer is committed, whether the
gateway ended it), and `AttemptFailed`, the failure of one attempt before the first byte, after which
another may be tried."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.proxy.asgi import Receive, Send
from gateway.proxy.breaker import Outcome
from gateway.proxy.resume import Resume
from gateway.records import Decision, ExplorationPlan, RequestRecord
from gateway.records.endpoints import ENDPOINT_PATHS
from gateway.settings import PoolConfig
from gateway.stats.progress import Attempt


@dataclass(slots=True)
class Job:
    """One request as ingress hands it over: parsed once, raw bytes kept for forwarding."""

    request_id: str
    endpoint: str  # "chat" | "completions"
    path: str  # upstream path, e.g. /v1/chat/completions
    pool: PoolConfig
    body: dict[str, Any]
    raw: bytes
    started: float  # gateway.clock.monotonic at arrival
    profile: str
    ranked: Sequence[str]
    stream: bool = False
    add_usage: bool = False  # the gateway asks for usage the client did not ask for (and strips it)
    exploration: ExplorationPlan | None = None  # the router's plan, applied by `on_dispatch` listeners
    prompt_tokens: int = 0  # the router's estimate of its prompt (0: none): what its prefill will take
    decision: Decision | None = None  # the router's whole decision, for the decision feed (read only)
    _bodies: dict[str, bytes] = field(default_factory=dict)

    def body_for(self, backend: str) -> bytes:
        """The bytes to send: the client's own, unless the model name or stream_options must change.
        UnencodableBody when the rewritten body cannot be encoded."""
        served = self.pool.served_name(backend)
        if served == self.body.get("model") and not self.add_usage:
            return self.raw
        if served not in self._bodies:
            self._bodies[served] = encoded(self.rewritten(served))
        return self._bodies[served]

    @property
    def upstream_api(self) -> str:
        """The API the backend is spoken to in, by the upstream path: the client's endpoint, or chat for a
        Messages request translated to chat (api/shaped.py)."""
        return next((name for name, path in ENDPOINT_PATHS.items() if path == self.path), self.endpoint)

    def rewritten(self, served: str) -> dict[str, Any]:
        """The body as a backend serving the model as `served` gets it: its model name, and usage asked
        for when the gateway wants it and the client did not."""
        body = dict(self.body, model=served)
        if self.add_usage:
            options = self.body.get("stream_options")
            body["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        return body


def encoded(body: dict[str, Any]) -> bytes:
    """A rewritten body's bytes; UnencodableBody when it cannot be encoded."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError as exc:
        raise UnencodableBody(str(exc)) from exc


class UnencodableBody(Exception):
    """The client's body could not be re-encoded for a backend (the door's checks should make this
    impossible): the client's fault, answered 400, never a backend's failure nor a reason to fail over."""


class Exchange:
    """One request's exchange with its client, from arrival to the last byte of its answer.

    `commit()` is called just before the answer's last message is sent: a disconnect reported after it
    is the server noticing the end of the response, not the client going away. `dispatched` turns true
    once the request went upstream for the first time; `streaming` once a stream's head went out.
    `end(why)` is the gateway ending it early (the drain deadline): the request's task is cancelled and
    dispatch answers with `why` (an error frame and `[DONE]` on a stream under way)."""

    __slots__ = (
        "job",
        "record",
        "send",
        "committed",
        "dispatched",
        "gone",
        "streaming",
        "ending",
        "task",
        "progress",
        "resume",
    )

    def __init__(self, job: Job, send: Send) -> None:
        self.job = job
        self.send = send
        self.record = RequestRecord(
            job.request_id, job.pool.model, job.endpoint, job.profile, job.stream, body=job.body
        )
        self.committed = False
        self.dispatched = False
        self.gone = False  # the client disconnected before the answer was committed
        self.streaming = False  # a stream's head (and maybe frames) went out: the answer is under way
        self.ending: str | None = None  # why the gateway ends the exchange early, once it does
        self.task: asyncio.Task[Any] | None = None  # the request's task, cancelled by `end`
        self.progress: Attempt | None = None  # its attempt in the progress book, while one is under way
        self.resume: Resume | None = None  # a stream that may be continued elsewhere if it breaks mid-answer

    def commit(self) -> None:
        self.committed = True

    def end(self, why: str) -> bool:
        """End the exchange now, for `why`; False when its answer is already going out (committed) or it
        is already ending."""
        if self.committed or self.ending is not None or self.task is None:
            return False
        self.ending = why
        self.task.cancel()
        return True

    async def watch_client(self, receive: Receive, task: asyncio.Task[Any]) -> None:
        """Wait for the client to disconnect; before the answer is committed, cancel `task` (the
        request's), which closes the upstream response at once, streaming or not."""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                # The server also reports disconnect once the response is complete; only earlier is a cancel.
                if not self.committed:
                    self.gone = True
                    task.cancel()
                return


class AttemptFailed(Exception):
    """An attempt failed before the first byte; the next candidate may be tried."""

    def __init__(self, why: str, status: int, answer: tuple[bytes, str] | None = None) -> None:
        super().__init__(why)
        self.status = status
        self.answer = answer  # a 5xx body and content type, passed through if it is the last one
        self.outcome: Outcome = "failure"  # for the breaker: a busy 503 or a 429 is back-pressure
        # No proof of death (a reset before the answer, an open breaker): it may serve again soon.
        self.may_recover = False
        self.code: str | None = None  # the error code the client gets if this is the last failure
        self.answered = False  # the engine answered it (an HTTP status, an error frame), no transport error


class StreamCut(Exception):
    """A stream broke after content went out, and its answer can be continued on another engine
    (proxy/resume.py): nothing more was sent to the client, the breaker hears of a failure. `moved`: it
    did not break, it was cut to finish on a faster engine (proxy/moves.py): nobody is blamed."""

    def __init__(self, why: str, moved: bool = False) -> None:
        super().__init__(why)
        self.moved = moved


class InputRejected(Exception):
    """Two engines failed the same request the same way (an engine 5xx that is neither overload nor
    unavailability): the input is the client's fault, answered 400, and neither engine is charged."""

    def __init__(self, first: tuple[str, AttemptFailed], second: tuple[str, AttemptFailed]) -> None:
        super().__init__(f"{first[0]}: {first[1]}; {second[0]}: {second[1]}")
        self.first = first
        self.second = second
