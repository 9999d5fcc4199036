"""Minimal blocking HTTP client for talking to a real engine: raw bytes, status and headers, bounded time.

``http.client`` is used on purpose: the tests pin the engine's exact wire format (SSE framing included),
so nothing may reframe, decompress or retry between the engine and the assertion.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any

DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


def request(
    port: int,
    method: str,
    path: str,
    payload: dict[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> RawResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        body = None if payload is None else json.dumps(payload).encode()
        headers = {} if body is None else {"Content-Type": "application/json"}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        lowered = {name.lower(): value for name, value in response.getheaders()}
        return RawResponse(response.status, lowered, data)
    finally:
        conn.close()


def get(port: int, path: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> RawResponse:
    return request(port, "GET", path, None, timeout_s)


def post(port: int, path: str, payload: dict[str, Any], timeout_s: float = DEFAULT_TIMEOUT_S) -> RawResponse:
    return request(port, "POST", path, payload, timeout_s)


def sse_events(body: bytes) -> list[str]:
    """Split an SSE body into its events (the text between blank-line separators), keeping each verbatim."""
    return [event for event in body.decode().split("\n\n") if event]


def sse_data(body: bytes) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order (``[DONE]`` included)."""
    payloads = []
    for event in sse_events(body):
        for line in event.split("\n"):
            if line.startswith("data: "):
                payloads.append(line[len("data: ") :])
    return payloads


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {sample name with labels: value}; comment lines skipped."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        samples[name] = float(value)
    return samples


def metric_types(text: str) -> dict[str, str]:
    """{metric family name: declared type} from the ``# TYPE`` lines."""
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
    return types
