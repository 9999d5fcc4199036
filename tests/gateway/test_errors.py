"""OpenAI-style error bodies and SSE error frames."""

from __future__ import annotations

import orjson

from gateway.api.errors import error_body, error_frame


def test_error_body_has_the_openai_shape() -> None:
    body = orjson.loads(error_body(404, "no such model", "model_not_found", "model"))
    assert body == {
        "error": {
            "message": "no such model",
            "type": "not_found_error",
            "param": "model",
            "code": "model_not_found",
        }
    }


def test_unknown_status_is_a_server_error() -> None:
    assert orjson.loads(error_body(500, "x"))["error"]["type"] == "server_error"


def test_error_frame_is_one_sse_data_frame() -> None:
    frame = error_frame("backend died", "upstream_stream_error")
    assert frame.startswith(b"data: {") and frame.endswith(b"}\n\n") and frame.count(b"\n\n") == 1
    assert orjson.loads(frame[6:])["error"]["code"] == "upstream_stream_error"
