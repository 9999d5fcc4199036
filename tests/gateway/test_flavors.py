"""Per-flavor health verdicts and capability discovery, on canned engine answers."""

from __future__ import annotations

from typing import Any

from gateway.backends.flavors import FLAVORS, Capabilities, Verdict


def fetcher(answers: dict[str, Any]) -> Any:
    async def fetch(path: str) -> Any:
        return answers.get(path)

    return fetch


def test_llamacpp_loading_503_is_a_warm_up_not_a_failure() -> None:
    judge = FLAVORS["llamacpp"].judge
    loading = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}
    assert judge(503, loading, False) is Verdict.LOADING
    assert judge(503, {"error": {"message": "no slot available"}}, True) is Verdict.FAILING
    assert judge(200, {"status": "ok"}, False) is Verdict.READY


def test_llamacpp_health_answers_of_every_documented_shape_are_judged() -> None:
    """reference/engines.md: the error may be an object or a plain string (vLLM's 401 shape, a proxy in
    front of the engine), flat (SGLang, old vLLM), or an early build's /health status; none may raise."""
    judge = FLAVORS["llamacpp"].judge
    assert judge(503, {"error": "Loading model"}, False) is Verdict.LOADING
    assert judge(503, {"error": "Service Unavailable"}, True) is Verdict.FAILING
    assert judge(503, {"object": "error", "message": "Loading model", "code": 503}, False) is Verdict.LOADING
    assert judge(503, {"status": "loading model"}, False) is Verdict.LOADING
    assert judge(503, {"status": "error"}, True) is Verdict.FAILING
    for odd in (None, "Loading model", ["Loading model"], 503, {"error": None}, {"error": ["x"]}):
        assert judge(503, odd, True) in (Verdict.LOADING, Verdict.FAILING)
    assert judge(500, {"error": "Loading model"}, False) is Verdict.FAILING  # only a 503 is a warm-up


def test_sglang_503_is_warm_up_before_ready_and_failure_after() -> None:
    judge = FLAVORS["sglang"].judge
    assert judge(503, None, False) is Verdict.LOADING
    assert judge(503, None, True) is Verdict.FAILING


def test_vllm_503_is_a_dead_engine() -> None:
    assert FLAVORS["vllm"].judge(503, None, False) is Verdict.FAILING


async def test_vllm_context_from_max_model_len_ignoring_lora_cards() -> None:
    models = {
        "data": [{"id": "q", "max_model_len": 131072}, {"id": "lora", "parent": "q", "max_model_len": None}]
    }
    found = await FLAVORS["vllm"].discover(fetcher({"/v1/models": models}))
    assert found == Capabilities(131072, None, ("q",))


async def test_llamacpp_context_and_vision_from_props() -> None:
    props = {"default_generation_settings": {"n_ctx": 8192}, "modalities": {"vision": True, "audio": False}}
    found = await FLAVORS["llamacpp"].discover(
        fetcher({"/props": props, "/v1/models": {"data": [{"id": "g"}]}})
    )
    assert found.context_length == 8192
    assert found.modalities == frozenset({"text", "image"})


async def test_llamacpp_context_falls_back_to_models_meta() -> None:
    models = {"data": [{"id": "g", "meta": {"n_ctx": 4096, "n_ctx_train": 32768}}]}
    found = await FLAVORS["llamacpp"].discover(fetcher({"/v1/models": models}))
    assert found.context_length == 4096 and found.modalities is None


async def test_sglang_context_from_server_info_and_vision_from_model_info() -> None:
    answers = {
        "/v1/models": {"data": [{"id": "s"}]},
        "/server_info": {"context_length": 65536},
        "/get_model_info": {"has_image_understanding": True, "has_audio_understanding": False},
    }
    found = await FLAVORS["sglang"].discover(fetcher(answers))
    assert found.context_length == 65536
    assert found.modalities == frozenset({"text", "image"})


async def test_sglang_and_llamacpp_announce_how_many_sequences_they_run() -> None:
    sglang = {
        "/v1/models": {"data": [{"id": "s", "max_model_len": 32768}]},
        "/server_info": {"max_running_requests": 48},
    }
    assert (await FLAVORS["sglang"].discover(fetcher(sglang))).capacity == 48
    llamacpp = {"/props": {"total_slots": 4}, "/v1/models": {"data": [{"id": "g"}]}}
    assert (await FLAVORS["llamacpp"].discover(fetcher(llamacpp))).capacity == 4
    vllm = {"/v1/models": {"data": [{"id": "v", "max_model_len": 8192}]}}
    assert (await FLAVORS["vllm"].discover(fetcher(vllm))).capacity is None


async def test_openai_flavor_probes_models_and_discovers_no_context() -> None:
    flavor = FLAVORS["openai"]
    assert flavor.health_path == "/v1/models"
    found = await flavor.discover(fetcher({"/v1/models": {"data": [{"id": "x"}]}}))
    assert found == Capabilities(None, None, ("x",))
