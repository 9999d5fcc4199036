"""Engines' error answers in the gateway's one shape (gateway/proxy/engine_errors.py), each engine's own
shape from reference/engines.md: the message and param kept, the type the gateway's for the status."""

from __future__ import annotations

import orjson
import pytest

from gateway.proxy.engine_errors import normalised, normalised_frames, unserved_body, unserved_route

NESTED_VLLM = b'{"error":{"message":"too long","type":"BadRequestError","param":"messages","code":400}}'
FLAT_SGLANG = b'{"object":"error","message":"too long","type":"BadRequestError","param":null,"code":400}'
LLAMACPP = b'{"error":{"code":400,"message":"too long","type":"invalid_request_error"}}'


@pytest.mark.parametrize("payload", [NESTED_VLLM, FLAT_SGLANG, LLAMACPP])
def test_each_engines_shape_becomes_the_gateways(payload: bytes) -> None:
    error = orjson.loads(normalised(400, payload))["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] == "too long" and error["type"] == "invalid_request_error"
    assert error["code"] == "engine_error"


def test_param_and_a_string_code_are_the_engines() -> None:
    payload = b'{"error":{"message":"m","type":"x","param":"model","code":"model_not_found"}}'
    error = orjson.loads(normalised(404, payload))["error"]
    assert (error["param"], error["code"], error["type"]) == ("model", "model_not_found", "not_found_error")


def test_an_engines_own_error_name_is_the_code_and_its_counts_are_kept() -> None:
    payload = (
        b'{"error":{"code":400,"message":"request (3024 tokens) exceeds the available context size (2048'
        b' tokens)","type":"exceed_context_size_error","n_prompt_tokens":3024,"n_ctx":2048}}'
    )
    error = orjson.loads(normalised(400, payload))["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "exceed_context_size_error")
    assert (error["n_prompt_tokens"], error["n_ctx"]) == (3024, 2048)


def test_fastapi_detail_plain_text_and_a_bare_string_keep_their_words() -> None:
    assert orjson.loads(normalised(404, b'{"detail":"Not Found"}'))["error"]["message"] == "Not Found"
    assert (
        orjson.loads(normalised(502, b"<html>Bad Gateway</html>"))["error"]["message"]
        == "<html>Bad Gateway</html>"
    )
    assert orjson.loads(normalised(401, b'{"error":"Unauthorized"}'))["error"]["message"] == "Unauthorized"


def test_anthropics_shape_passes_untouched() -> None:
    payload = b'{"type":"error","error":{"type":"invalid_request_error","message":"m"}}'
    assert normalised(400, payload) == payload


def test_a_route_miss_is_told_from_an_unknown_model() -> None:
    assert unserved_route(404, b'{"detail":"Not Found"}')
    assert unserved_route(404, b'{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}')
    unknown_model = (
        b'{"error":{"message":"The model `x` does not exist.","type":"NotFoundError","param":"model"}}'
    )
    assert not unserved_route(404, unknown_model)
    assert not unserved_route(400, b'{"detail":"Not Found"}')


def test_the_unserved_answer_names_the_path_and_the_backend() -> None:
    error = orjson.loads(unserved_body("/v1/embeddings", "fp8-mtp", b'{"detail":"Not Found"}'))["error"]
    assert "fp8-mtp" in error["message"] and "/v1/embeddings" in error["message"]
    assert error["code"] == "endpoint_not_served" and error["type"] == "not_found_error"


def test_an_engines_error_frame_is_reshaped_and_other_frames_pass_untouched() -> None:
    content = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
    error = b'data: {"error":{"message":"too long","type":"BadRequestError","param":null,"code":400}}\n\n'
    done = b"data: [DONE]\n\n"
    out = normalised_frames(content + error + done)
    assert out.startswith(content) and out.endswith(done)
    frame = out[len(content) : -len(done)]
    reshaped = orjson.loads(frame.removeprefix(b"data: ").strip())["error"]
    assert reshaped["message"] == "too long" and reshaped["type"] == "invalid_request_error"
    assert normalised_frames(content + done) == content + done
