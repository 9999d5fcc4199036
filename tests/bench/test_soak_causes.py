"""The soak's breakdown names the cause of every failed attempt the gateway reports: each wording of
proxy/dispatch.py, proxy/relay.py, proxy/upstream.py and proxy/stall.py maps to a short cause, and a
wording it does not know is shown by its own words, never as an anonymous "other"."""

from __future__ import annotations

import orjson
import pytest

from gateway.bench.soak_load import _causes, cause_of

WORDINGS = {
    "e1: ClientConnectorError: Connection refused": "refused",
    "e1: ClientConnectorError: Connection reset by peer": "connect error",
    "e1: connect timeout to backend e1 (no connection within 5s)": "connect timeout",
    "e1: circuit breaker open": "breaker open",
    "e1: the backend's stream ended before any content": "ended before content",
    "e1: the backend's response broke off: ClientPayloadError (after the response head)": "reset",
    "e1: the backend's response broke off: ServerDisconnectedError": "reset",
    "e1: no response headers from the backend in time": "timeout",
    "e1: no first token from the backend within the first-token timeout (after the response head, "
    "before any content)": "timeout",
    "e1: first-token timeout: no content within 600s of arrival": "timeout",
    "e1: backend e1 stalled: no content for 3.2 s": "stalled",
    "e1: backend e1 is down: connection refused": "down",
    "e1: HTTP 500": "5xx",
    "e1: error frame before any content: HTTP 500 boom": "5xx",
    "e1: the backend answered a stream request with a 200 of text/html, not SSE": "bad answer",
    "e1: the backend failed mid-stream: the backend sent an SSE frame over 8388608 bytes": "bad answer",
    "e2: e2 cannot count the answer's tokens to continue it": "continuation",
}


@pytest.mark.parametrize("wording, cause", WORDINGS.items())
def test_each_wording_has_its_cause(wording: str, cause: str) -> None:
    assert cause_of(wording) == cause


def test_an_unknown_wording_is_named_by_its_words() -> None:
    raw = orjson.dumps(
        {"error": {"message": "no backend answered: e1: something new went wrong; e2: HTTP 502"}}
    )
    assert _causes(raw) == " (5xx, unknown: something new went wrong)"
