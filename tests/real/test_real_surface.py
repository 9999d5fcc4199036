"""The read-only surface of a real llama-server: readiness, /health, /v1/models, /props, /metrics."""

from __future__ import annotations

import pytest
from engine_fleet import CONTEXT_SIZE, EnginePair
from engine_http import get, metric_types, parse_metrics, post
from llama_process import LlamaServer
from real_prompts import chat

pytestmark = pytest.mark.real

LOADING_BODY = b'{"error":{"message":"Loading model","type":"unavailable_error","code":503}}'

# Every family this build exposes, with its declared type. The per-position acceptance family only
# appears once a speculative request has completed, so it is checked separately.
METRIC_FAMILIES = {
    "llamacpp:prompt_tokens_total": "counter",
    "llamacpp:prompt_tokens_cached_total": "counter",
    "llamacpp:prompt_seconds_total": "counter",
    "llamacpp:tokens_predicted_total": "counter",
    "llamacpp:tokens_predicted_seconds_total": "counter",
    "llamacpp:n_decode_total": "counter",
    "llamacpp:n_tokens_max": "counter",
    "llamacpp:spec_decode_num_draft_tokens_total": "counter",
    "llamacpp:spec_decode_num_accepted_tokens_total": "counter",
    "llamacpp:spec_decode_num_drafts_total": "counter",
    "llamacpp:prompt_tokens_seconds": "gauge",
    "llamacpp:predicted_tokens_seconds": "gauge",
    "llamacpp:requests_processing": "gauge",
    "llamacpp:requests_deferred": "gauge",
    "llamacpp:n_busy_slots_per_decode": "gauge",
}
PER_POSITION_FAMILY = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"


def test_readiness_goes_from_loading_503_to_health_ok(engine_pair: EnginePair) -> None:
    for server in (engine_pair.plain, engine_pair.speculative):
        seen = server.readiness
        assert seen.ready_body == b'{"status":"ok"}'
        assert seen.other_statuses == []
        # Whenever the poller caught the loading phase, the answer was exactly this 503.
        assert seen.loading_bodies <= {LOADING_BODY}
        assert seen.loading_content_types <= {"application/json; charset=utf-8"}
        # The HTTP listener starts before the model loads: refused only for the first instants, then 503.
        assert seen.first_503_s is not None and seen.first_503_s < seen.ready_s


def test_health_answers_ok_once_loaded(plain_engine: LlamaServer) -> None:
    response = get(plain_engine.port, "/health")
    assert (response.status, response.json()) == (200, {"status": "ok"})
    assert get(plain_engine.port, "/v1/health").status == 200


def test_models_lists_one_model_named_by_the_model_argument(engine_pair: EnginePair) -> None:
    body = get(engine_pair.plain.port, "/v1/models").json()
    assert body["object"] == "list"
    (card,) = body["data"]
    assert card["object"] == "model"
    assert card["owned_by"] == "llamacpp"
    # Without --alias the id is the --model argument verbatim (a full path), not the file's base name.
    assert card["id"] == str(engine_pair.model_path)
    assert card["aliases"] == [str(engine_pair.model_path)]
    assert card["meta"]["n_ctx"] == CONTEXT_SIZE
    assert card["meta"]["n_ctx_train"] == 32768
    assert "max_model_len" not in card
    meta_keys = {"vocab_type", "n_vocab", "n_ctx", "n_ctx_train", "n_embd", "n_params", "size"}
    assert meta_keys <= card["meta"].keys()


def test_props_reports_context_slots_and_text_only_modalities(plain_engine: LlamaServer) -> None:
    props = get(plain_engine.port, "/props").json()
    assert props["default_generation_settings"]["n_ctx"] == CONTEXT_SIZE
    assert props["total_slots"] == 1
    assert props["modalities"] == {"vision": False, "audio": False, "video": False}
    assert props["build_info"].startswith("b")


def test_props_params_do_not_reveal_server_side_speculation(engine_pair: EnginePair) -> None:
    # --spec-type configures the server, while /props shows the per-request defaults: "none" on both.
    for server in (engine_pair.plain, engine_pair.speculative):
        params = get(server.port, "/props").json()["default_generation_settings"]["params"]
        assert params["speculative.types"] == "none"


def test_slots_flag_speculation_and_show_its_types_after_a_request(engine_pair: EnginePair) -> None:
    expected_types = {engine_pair.plain.name: "none", engine_pair.speculative.name: "none,ngram-simple"}
    for server in (engine_pair.plain, engine_pair.speculative):
        post(server.port, "/v1/chat/completions", chat("Say hi.", max_tokens=2))
        (slot,) = get(server.port, "/slots").json()
        assert slot["id"] == 0 and slot["n_ctx"] == CONTEXT_SIZE and slot["is_processing"] is False
        assert slot["speculative"] is (server is engine_pair.speculative)
        # The slot keeps the last task's params; a slot that never ran a task has no "params" key.
        assert slot["params"]["speculative.types"] == expected_types[server.name]


def test_metrics_expose_exactly_the_llamacpp_families(plain_engine: LlamaServer) -> None:
    response = get(plain_engine.port, "/metrics")
    assert response.status == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    types = metric_types(response.text)
    assert {k: v for k, v in types.items() if k != PER_POSITION_FAMILY} == METRIC_FAMILIES


def test_metrics_count_tokens_and_keep_spec_counters_at_zero_without_drafting(
    plain_engine: LlamaServer,
) -> None:
    before = parse_metrics(get(plain_engine.port, "/metrics").text)
    reply = post(plain_engine.port, "/v1/chat/completions", chat("Say hi.", max_tokens=4)).json()
    after = parse_metrics(get(plain_engine.port, "/metrics").text)
    predicted = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    assert predicted == reply["usage"]["completion_tokens"]
    assert after["llamacpp:spec_decode_num_draft_tokens_total"] == 0
    assert PER_POSITION_FAMILY not in metric_types(get(plain_engine.port, "/metrics").text)
