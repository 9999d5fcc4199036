from __future__ import annotations

import asyncio
import statistics
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.api.asgi import http_scope
from gateway.app import adaptive_scorer, build_app, build_gateway, decode_probes
from gateway.backends.registry import Registry, Status
from gateway.bench.routing_trace import CLASSES, Lifespan, post, request_body
from gateway.commands.serve import settings_for_fleet
from gateway.policy.load import parse_policy
from gateway.proxy.accounting import Accounting
from gateway.proxy.decode_probe import PROBE_PROFILE, PROBE_TOKENS, DecodeProbes
from gateway.proxy.upstream import MockResponse, MockTransport
from gateway.records import BackendSnapshot, RequestRecord, Sample
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter
from gateway.settings import BackendConfig, MeasurementConfig, Settings, load_settings
from gateway.sim.fleet import load_fleet
from gateway.sim.runner import TwinFleet
from gateway.stats.measurement import Measurement, record_sample, trimmed_mean
from tests.adaptive.routing_loop import POLICY, with_adaptive

REPO = Path(__file__).resolve().parents[2]


def record(**fields: Any) -> RequestRecord:
    base: dict[str, Any] = dict(request_id="r", model="m", endpoint="chat", profile="chat", stream=True)
    return RequestRecord(**{**base, **fields})


def test_a_completion_record_becomes_a_sample_timed_from_dispatch() -> None:
    r = record(
        backend="x",
        status=200,
        inflight_at_dispatch=3,
        device_inflight_at_dispatch=5,
        ttft=0.5,
        e2e=2.5,
        overhead=0.1,
        itl=[0.02] * 9 + [0.22],
        output_tokens=41,
        prompt_tokens=100,
        device_shared_s=0.6,
        load_s=9.6,
    )
    s = record_sample(r)
    assert s is not None
    assert (round(s.ttft or 0, 3), round(s.e2e, 3), s.concurrency, s.error) == (0.4, 2.4, 3, False)
    assert s.device_share == 0.25  # 0.6 s of its 2.4 s with another backend of its device busy
    assert s.mean_load is not None and abs(s.mean_load - 4.0) < 1e-9  # sent at 3, decoded among 4
    assert s.mean_itl is not None and abs(s.mean_itl - 0.04) < 1e-9
    assert s.trimmed_itl is not None and abs(s.trimmed_itl - 0.02) < 1e-9  # the longest tenth left out
    assert abs((s.tpot or 0) - 0.05) < 1e-9  # (2.4 - 0.4) / 40: decode only


def test_a_trimmed_gap_leaves_out_prefill_stalls_and_holds_still_where_a_median_would_flip() -> None:
    assert abs(trimmed_mean([0.02] * 18 + [2.0, 2.5]) - 0.02) < 1e-9  # two prefills beside one stream
    # A speculative engine sending a step's tokens as two frames: gaps near zero and a step long. Their
    # median is one or the other by a single gap; the trimmed mean stays about half a step either way.
    short_first, long_first = [0.001] * 11 + [0.03] * 10, [0.001] * 10 + [0.03] * 11
    assert statistics.median(short_first) == 0.001 and statistics.median(long_first) == 0.03
    assert abs(trimmed_mean(short_first) - trimmed_mean(long_first)) < 0.003


def test_failures_count_as_errors_but_client_faults_and_disconnects_are_not_recorded() -> None:
    failed = record_sample(record(backend="x", status=502, e2e=1.0))
    assert failed is not None and failed.error
    broke = record_sample(record(backend="x", status=200, error="broke off", ttft=0.1, e2e=1.0))
    assert broke is not None and broke.error
    assert record_sample(record(backend="x", status=400, e2e=0.01)) is None
    assert record_sample(record(backend="x", status=499, e2e=0.5)) is None
    assert record_sample(record(backend=None, status=503)) is None


def test_windows_stay_bounded_under_any_traffic(tmp_path: Path) -> None:
    m = Measurement(MeasurementConfig(), [], tmp_path, None)
    m.recorder.max_samples, m.recorder.max_cells = 16, 4  # small bounds, same code path
    m.recorder._cells.clear()
    for i in range(2000):
        m.observe(
            record(
                backend=f"b{i % 7}",
                profile=f"p{i % 3}",
                status=200,
                ttft=0.1,
                e2e=1.0,
                output_tokens=10,
                inflight_at_dispatch=1,
            )
        )
    assert len(m.recorder) <= 4
    assert all(len(entries) <= 16 for _, _, entries in m.recorder.cells())


def fast_and_slow() -> list[tuple[str, Sample]]:
    fast = Sample(e2e=1.0, ttft=0.05, output_tokens=64, prompt_tokens=40, concurrency=1)
    slow = Sample(e2e=4.0, ttft=0.60, output_tokens=64, prompt_tokens=40, concurrency=1)
    return [("y", fast)] * 8 + [("x", slow)] * 8


def test_a_restarted_gateway_routes_from_the_loaded_snapshot(tmp_path: Path) -> None:
    # Snapshots restore a backend's cells only into the same backend (name and URL): both runs name them.
    backends = [BackendConfig(name=n, url=f"http://127.0.0.1:{port}") for n, port in (("x", 1), ("y", 2))]

    async def scenario() -> str:
        first = Measurement(MeasurementConfig(), backends, tmp_path, None)
        await first.start()
        for backend, sample in fast_and_slow():
            first.recorder.record(backend, "chat", sample)
        await first.stop()  # the shutdown save
        second = Measurement(MeasurementConfig(), backends, tmp_path, None)
        await second.start()
        await second.stop()
        assert second.restored == 16
        policy = FixedPolicy(parse_policy(with_adaptive(POLICY, explore_epsilon=0)))
        router = PolicyRouter(policy, objective_scorer=adaptive_scorer(second, backends))
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
        return router.route("chat", chat, [BackendSnapshot("x"), BackendSnapshot("y")]).ranked[0]

    # The policy prefers x; only the restored measurements can say y answers faster.
    assert asyncio.run(scenario()) == "y"


def test_explain_shows_the_predictions_and_why_the_winner_won(tmp_path: Path) -> None:
    m = Measurement(MeasurementConfig(), [], tmp_path, None)
    for backend, sample in fast_and_slow():
        m.recorder.record(backend, "chat", sample)
    router = PolicyRouter(FixedPolicy(parse_policy(POLICY)), objective_scorer=adaptive_scorer(m, []))
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    e = router.explain("chat", chat, [BackendSnapshot("x"), BackendSnapshot("y")])
    adaptive = e["scoring"]["adaptive"]
    assert e["chosen"] == "y"
    assert adaptive["why"].startswith("y predicted best for ttft")
    assert {p["backend"]: round(p["value"], 2) for p in adaptive["predictions"]} == {"x": 0.6, "y": 0.05}


def test_the_gateway_records_scrapes_and_serves_live_stats_on_a_twin(tmp_path: Path) -> None:
    spec = load_fleet(REPO / "deploy/fleets/spark-duo-35b.yaml")
    spec = spec.model_copy(update={"engines": [e.model_copy(update={"warmup_s": 0.0}) for e in spec.engines]})

    async def scenario() -> tuple[dict[str, Any], str]:
        async with TwinFleet(spec, time_scale=200.0, ephemeral_ports=True) as fleet:
            await fleet.wait_ready()
            base = settings_for_fleet(spec, {n: fleet.url(n) for n in fleet.names})
            settings = load_settings(
                None,
                **{
                    **base.model_dump(mode="json", exclude_none=True),
                    "state_dir": str(tmp_path),
                    "probe": {"starting_interval_s": 0.02},
                    "measurement": {"scrape_interval_s": 0.05},
                },
            )
            gateway = build_gateway(settings)
            accounting = gateway.dispatcher.accounting
            assert accounting.progress is not None
            book = accounting.progress

            def seen_at_dispatch(job: Any, backend: str) -> None:  # the router sees the prompt in flight
                queued.append(book.view(backend).requests[-1].prompt_tokens)

            queued: list[int] = []
            accounting.on_dispatch.append(seen_at_dispatch)
            app = build_app(gateway)
            async with Lifespan(app):
                async with asyncio.timeout(20):
                    while any(s.status is not Status.READY for s in gateway.registry.backends.values()):
                        await asyncio.sleep(0.01)
                    cls = CLASSES["A"]
                    for i in range(3):
                        body = request_body(cls, spec.engines[0].served_model_name, 64, seed=i)
                        body["max_tokens"] = 16
                        assert (await post(app, cls, body)).ok
                    await asyncio.sleep(0.2)  # a few scrape rounds
                    stats = await _get(app, "/gateway/stats")
                    metrics = (await _get_raw(app, "/metrics")).decode()
        assert len(queued) == 3 and all(32 <= n <= 128 for n in queued), queued  # the ~64-token estimate
        return stats, metrics

    stats, metrics = asyncio.run(scenario())
    served = stats["backends"]["fp8-mtp"]["default"]
    assert served["count"] == 3 and served["ttft_p50"] is not None
    assert stats["engines"]["fp8-mtp"]["fresh"] is True
    assert stats["engines"]["fp8-mtp"]["acceptance_total"]["acceptance_rate"] > 0.5
    assert 'gateway_live_samples{backend="fp8-mtp",profile="default"} 3.0' in metrics
    assert 'gateway_engine_scrape_age_seconds{backend="fp8-mtp"}' in metrics
    assert (tmp_path / "live-stats.json").exists()  # saved at shutdown


async def _get_raw(app: Any, path: str) -> bytes:
    chunks: list[bytes] = []
    scope = http_scope("GET", path)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return b"".join(chunks)


async def _get(app: Any, path: str) -> dict[str, Any]:
    result: dict[str, Any] = orjson.loads(await _get_raw(app, path))
    return result


def test_a_policy_file_wires_the_adaptive_scorer_into_the_router() -> None:
    settings = settings_for_fleet(
        load_fleet(REPO / "deploy/fleets/spark-duo-35b.yaml"),
        {"fp8-base": "http://127.0.0.1:1", "fp8-mtp": "http://127.0.0.1:2"},
    )
    gateway = build_gateway(settings)
    assert isinstance(gateway.router, PolicyRouter) and gateway.router.objective_scorer is not None
    assert gateway.measurement is not None and gateway.measurement.scraper is not None


@pytest.mark.parametrize("flavor", ["vllm", "sglang", "llamacpp"])
def test_a_decode_probe_is_answered_by_the_engine_and_recorded_under_its_own_profile(
    tmp_path: Path, flavor: str
) -> None:
    spec = load_fleet(REPO / "deploy/fleets/spark-duo-35b.yaml")
    engines = [e.model_copy(update={"warmup_s": 0.0, "flavor": flavor}) for e in spec.engines]
    spec = spec.model_copy(update={"engines": engines})

    async def scenario() -> list[Sample]:
        async with TwinFleet(spec, time_scale=200.0, ephemeral_ports=True) as fleet:
            await fleet.wait_ready()
            settings = settings_for_fleet(spec, {n: fleet.url(n) for n in fleet.names})
            gateway = build_gateway(settings)
            probes = next(s for s in gateway.services if isinstance(s, DecodeProbes))
            async with Lifespan(build_app(gateway)), asyncio.timeout(20):
                probes.send("fp8-base")
                assert gateway.measurement is not None
                recorder = gateway.measurement.recorder
                while not (samples := recorder.samples("fp8-base", PROBE_PROFILE)):
                    await asyncio.sleep(0.01)
                return list(samples)

    [sample] = asyncio.run(scenario())
    assert sample.output_tokens == PROBE_TOKENS and not sample.error
    assert sample.ttft is not None and 0 < sample.ttft < sample.e2e
    assert sample.concurrency == 1 and sample.device_share == 0.0  # nothing else ran on the Spark


def test_decode_probes_go_where_each_backend_serves_text_under_its_pool_s_model_name() -> None:
    settings = Settings(
        backends=[
            {"name": "base", "url": "http://127.0.0.1:1/", "api_key": "k"},
            {"name": "chat-only", "url": "http://127.0.0.1:2", "endpoints": ["chat"]},
            {"name": "vectors", "url": "http://127.0.0.1:3", "endpoints": ["embeddings"]},
        ],
        pools=[
            {
                "model": "qwen",
                "backends": ["base", "chat-only", "vectors"],
                "served_names": {"base": "Qwen/Qwen3.6-35B-A3B-FP8"},
            }
        ],
    )
    measurement = Measurement(settings.measurement, settings.backends, None, None)
    probes = decode_probes(settings, MockTransport(_no_answer), measurement, Accounting(Registry(settings)))
    assert set(probes.targets) == {"base", "chat-only"}  # an embeddings-only backend decodes nothing
    base, chat = probes.targets["base"], probes.targets["chat-only"]
    assert (base.url, base.model, base.chat) == ("http://127.0.0.1:1", "Qwen/Qwen3.6-35B-A3B-FP8", False)
    assert base.headers["authorization"] == "Bearer k"
    assert (chat.model, chat.chat) == ("qwen", True)


async def _no_answer(url: str, headers: Any, body: bytes) -> MockResponse:
    raise AssertionError("no probe is sent in this test")
