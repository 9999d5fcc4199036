"""Static checks of deploy/ for one DGX Spark: the compose file, the gateway config it mounts, Prometheus'
scrape config and the Grafana provisioning and dashboard.

There is no Docker daemon where these run, so nothing is started with Docker. The dashboard's PromQL is
checked against metric names really exposed: a gateway built from deploy/gateway.spark.yaml serves the
twin of the same two vLLM engines in-process, takes one request, and both /metrics pages are read.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from loopback import serve_asgi
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import build_app, build_gateway
from gateway.policy.load import load_policy
from gateway.settings import Settings, load_settings
from gateway.sim.fleet import load_fleet
from gateway.sim.runner import TwinFleet

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPOSE = DEPLOY / "compose.spark.yaml"
GATEWAY_CONFIG = DEPLOY / "gateway.spark.yaml"
IMAGE_APP = Path("/app")  # the gateway image's copy of the repo's policies/ and fleets
PROMETHEUS = DEPLOY / "prometheus.yml"
DATASOURCES = DEPLOY / "grafana/provisioning/datasources"
PROVIDERS = DEPLOY / "grafana/provisioning/dashboards"
DASHBOARD = DEPLOY / "grafana/dashboards/spark-gateway.json"
# The twin fleet of the same two engines (Qwen3.6-35B-A3B-FP8 with and without MTP, seed 003).
TWIN_FLEET = DEPLOY / "fleets/spark-duo-35b.yaml"
PROMTOOL = "/usr/bin/promtool"
MODEL = "Qwen/Qwen3.6-35B-A3B-FP8"
ENGINES = ("vllm-base", "vllm-mtp")
EXPECTED_PORTS = {
    "gateway": "8080:8080",
    "vllm-base": "8101:8000",
    "vllm-mtp": "8102:8000",
    "prometheus": "9090:9090",
    "grafana": "3000:3000",
}
# Engines load 42 shards (~290 s) and then capture CUDA graphs: a shorter start period marks them unhealthy.
ENGINE_START_PERIOD_S = 300.0
SCRAPE_TIMEOUT_S = 30.0

# What the dashboard must show (the panels the deployment is for); a removed panel fails the test.
REQUIRED_METRICS = {
    "gateway_requests_total",
    "gateway_ttft_seconds_bucket",
    "gateway_itl_seconds_bucket",
    "gateway_tpot_seconds_bucket",
    "gateway_output_tokens_total",
    "gateway_backend_inflight",
    "gateway_backend_ready",
    "gateway_backend_breaker_state",
    "gateway_policy_reloads_total",
    "gateway_overhead_seconds_bucket",
    "gateway_live_ttft_p50_seconds",
    "gateway_engine_spec_acceptance_rate",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
}


# ---------------------------------------------------------------- loading helpers


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = _yaml(COMPOSE)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


@pytest.fixture(scope="module")
def settings() -> Settings:
    return load_settings(GATEWAY_CONFIG)


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def _duration_s(text: str) -> float:
    """A compose duration such as "90s", "15m" or "1m30s", in seconds."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a compose duration: {text!r}"
    return sum(float(number) * units[unit] for number, unit in parts)


def _flags(service: dict[str, Any]) -> dict[str, str]:
    """`--name=value` / `--name` arguments of a service's command list."""
    flags = {}
    for arg in service["command"]:
        if arg.startswith("--"):
            name, _, value = arg[2:].partition("=")
            flags[name] = value
    return flags


def _container_ports(service: dict[str, Any]) -> set[int]:
    return {int(str(mapping).rsplit(":", 1)[1]) for mapping in service.get("ports", [])}


def _bind_sources(service: dict[str, Any]) -> list[Path]:
    """Host paths of the service's bind mounts (relative to the compose file), named volumes left out."""
    sources = []
    for mount in service.get("volumes", []):
        source = str(mount).split(":", 1)[0]
        if source.startswith((".", "/")):
            sources.append((COMPOSE.parent / source).resolve())
    return sources


def _mount_target(service: dict[str, Any], source: str) -> str:
    for mount in service.get("volumes", []):
        parts = str(mount).split(":")
        if parts[0] == source:
            return parts[1]
    raise AssertionError(f"no mount of {source} in {service}")


def _scrape_targets(config: dict[str, Any]) -> dict[str, list[tuple[str, dict[str, str]]]]:
    """job name -> [(host:port, static labels)]."""
    jobs: dict[str, list[tuple[str, dict[str, str]]]] = {}
    for job in config["scrape_configs"]:
        for group in job.get("static_configs", []):
            for target in group["targets"]:
                jobs.setdefault(job["job_name"], []).append((target, group.get("labels", {})))
    return jobs


# ---------------------------------------------------------------- compose


def test_compose_has_the_five_services_with_their_published_ports(services: dict[str, Any]) -> None:
    assert set(services) == set(EXPECTED_PORTS)
    for name, mapping in EXPECTED_PORTS.items():
        assert [str(p) for p in services[name]["ports"]] == [mapping], name


def test_every_service_has_a_healthcheck_and_engines_wait_long_enough(services: dict[str, Any]) -> None:
    for name, service in services.items():
        check = service.get("healthcheck")
        assert check and check["test"][0] == "CMD" and len(check["test"]) > 1, name
    for name in ENGINES:
        check = services[name]["healthcheck"]
        assert _duration_s(check["start_period"]) >= ENGINE_START_PERIOD_S, name
        assert "/health" in " ".join(check["test"]), name


def test_engines_reserve_the_gpu_and_run_seed_003_flags(services: dict[str, Any]) -> None:
    for name in ENGINES:
        service = services[name]
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices), name
        assert service["command"][0] == MODEL, name
        flags = _flags(service)
        assert flags["max-model-len"] == "131072"
        assert flags["max-num-batched-tokens"] == "16384"
        assert flags["max-num-seqs"] == "32"
        assert flags["kv-cache-dtype"] == "fp8_e4m3"
        assert {"enable-chunked-prefill", "enable-prefix-caching", "no-async-scheduling"} <= set(flags)


def test_only_the_mtp_engine_speculates_with_two_mtp_tokens(services: dict[str, Any]) -> None:
    assert "speculative-config" not in _flags(services["vllm-base"])
    speculative = json.loads(_flags(services["vllm-mtp"])["speculative-config"])
    assert speculative == {"method": "mtp", "num_speculative_tokens": 2}


def test_the_two_engines_split_the_unified_memory(services: dict[str, Any]) -> None:
    shares = [float(_flags(services[name])["gpu-memory-utilization"]) for name in ENGINES]
    # Both engines live on one GB10: together they must leave room for the OS and the rest of the stack.
    assert all(share > 0.3 for share in shares) and sum(shares) <= 0.9, shares


def test_engines_listen_on_the_container_port_they_publish(services: dict[str, Any]) -> None:
    for name in ENGINES:
        assert _container_ports(services[name]) == {int(_flags(services[name])["port"])}, name


def test_every_file_a_service_references_exists(services: dict[str, Any]) -> None:
    build = services["gateway"]["build"]
    context = (COMPOSE.parent / build["context"]).resolve()
    assert (context / build["dockerfile"]).is_file()
    for name, service in services.items():
        for source in _bind_sources(service):
            assert source.exists(), f"{name} mounts {source}, which does not exist"


def test_named_volumes_are_declared(compose: dict[str, Any], services: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    for name, service in services.items():
        for mount in service.get("volumes", []):
            source = str(mount).split(":", 1)[0]
            if not source.startswith((".", "/", "$", "~")):
                assert source in declared, f"{name} uses undeclared volume {source}"


def test_gateway_mounts_the_spark_config_where_its_image_reads_it(services: dict[str, Any]) -> None:
    gateway = services["gateway"]
    target = _mount_target(gateway, "./gateway.spark.yaml")
    assert gateway["command"][gateway["command"].index("--config") + 1] == target
    # The Dockerfile's CMD reads the same path, so `docker run` without the compose command works too.
    assert target in (REPO / "Dockerfile").read_text()


def test_docker_compose_accepts_the_file() -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client installed")
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"the docker client has no compose plugin: {probe.stderr.strip().splitlines()[0]}")
    # `config` renders the model without talking to a daemon.
    result = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


# ---------------------------------------------------------------- gateway config


def test_gateway_spark_config_loads_with_two_backends_in_one_pool(settings: Settings) -> None:
    assert {b.name for b in settings.backends} == {"fp8-mtp", "fp8-base"}
    assert [p.model for p in settings.pools] == [MODEL]
    assert set(settings.pools[0].backends) == {"fp8-mtp", "fp8-base"}
    assert settings.policy == IMAGE_APP / "policies/spark-mtp-split.yaml"


def test_gateway_backends_are_the_compose_engines_on_their_container_port(
    settings: Settings, services: dict[str, Any]
) -> None:
    hosts = set()
    for backend in settings.backends:
        match = re.fullmatch(r"http://([\w-]+):(\d+)", backend.url)
        assert match, backend.url
        host, port = match.group(1), int(match.group(2))
        assert host in ENGINES and port in _container_ports(services[host]), backend.url
        hosts.add(host)
    assert hosts == set(ENGINES)


def test_gateway_policy_loads_and_prefers_only_configured_backends(settings: Settings) -> None:
    assert settings.policy is not None
    # The path is inside the image: /app (its WORKDIR) is where policies/ is copied.
    assert f"WORKDIR {IMAGE_APP}" in (REPO / "Dockerfile").read_text()
    policy = load_policy(_in_repo(settings.policy))
    names = {b.name for b in settings.backends}
    preferred = {name for profile in policy.policy.profiles for name in profile.prefer}
    assert preferred and preferred <= names, preferred - names


# ---------------------------------------------------------------- Prometheus


def test_prometheus_scrapes_the_gateway_and_both_engines_by_service_name(
    services: dict[str, Any], settings: Settings
) -> None:
    jobs = _scrape_targets(_yaml(PROMETHEUS))
    assert [t for t, _ in jobs["spark-gateway"]] == ["gateway:8080"]
    engine_targets = dict(jobs["vllm"])
    assert set(engine_targets) == {f"{name}:8000" for name in ENGINES}
    for targets in jobs.values():
        for target, _ in targets:
            host, port = target.rsplit(":", 1)
            service = "prometheus" if host == "localhost" else host
            assert int(port) in _container_ports(services[service]), target
    # The `backend` label joins engine panels to the gateway's per-backend ones.
    by_url = {b.url.removeprefix("http://"): b.name for b in settings.backends}
    assert {t: labels["backend"] for t, labels in engine_targets.items()} == by_url


def test_promtool_accepts_the_prometheus_config() -> None:
    if not Path(PROMTOOL).exists():
        pytest.skip("promtool is not installed (Debian package prometheus)")
    result = subprocess.run(
        [PROMTOOL, "check", "config", str(PROMETHEUS)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------- Grafana provisioning


def test_grafana_datasource_is_the_compose_prometheus_with_the_dashboards_uid(
    services: dict[str, Any], dashboard: dict[str, Any]
) -> None:
    sources = [s for f in sorted(DATASOURCES.glob("*.yaml")) for s in _yaml(f)["datasources"]]
    assert len(sources) == 1 and sources[0]["type"] == "prometheus"
    assert sources[0]["url"] == "http://prometheus:9090" and 9090 in _container_ports(services["prometheus"])
    uids = {_datasource_uid(panel) for panel in _panels(dashboard)}
    assert uids == {sources[0]["uid"]}


def test_grafana_dashboard_provider_reads_the_mounted_dashboard_folder(services: dict[str, Any]) -> None:
    providers = [p for f in sorted(PROVIDERS.glob("*.yaml")) for p in _yaml(f)["providers"]]
    grafana = services["grafana"]
    assert [p["options"]["path"] for p in providers] == [_mount_target(grafana, "./grafana/dashboards")]
    assert _mount_target(grafana, "./grafana/provisioning") == "/etc/grafana/provisioning"
    assert DASHBOARD.parent.resolve() in _bind_sources(grafana)


def test_dashboard_panels_have_unique_ids_and_fit_the_grid(dashboard: dict[str, Any]) -> None:
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
    assert all(target["expr"] for panel in _panels(dashboard) for target in panel["targets"])


# ---------------------------------------------------------------- dashboard PromQL vs real metrics


_KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects: identifiers outside label matchers, ranges and grouping
    clauses that are not function calls or keywords."""
    names: set[str] = set()
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    for match in re.finditer(r"(?<![\w.:$])[a-zA-Z_:][\w:]*", text):
        following = text[match.end() :].lstrip()
        if not following.startswith("(") and match.group() not in _KEYWORDS:
            names.add(match.group())
    return names


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def _datasource_uid(panel: dict[str, Any]) -> str:
    uid: str = panel["datasource"]["uid"]
    return uid


def _expressions(dashboard: dict[str, Any]) -> list[str]:
    exprs = [target["expr"] for panel in _panels(dashboard) for target in panel["targets"]]
    for variable in dashboard["templating"]["list"]:
        query = variable["query"]["query"]
        inner = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
        exprs.append(inner.group(1) if inner else query)
    return exprs


def _grafana_free(expr: str) -> str:
    """The expression with Grafana's variables replaced by what Prometheus would receive."""
    for variable, value in (("$__rate_interval", "1m"), ("$__range", "1h"), ("$__interval", "15s")):
        expr = expr.replace(variable, value)
    return re.sub(r"\$\w+", ".*", expr)


def test_metric_name_extraction_skips_labels_functions_and_ranges() -> None:
    expr = (
        "histogram_quantile(0.95, sum by (backend, le) "
        '(rate(vllm:x_bucket{backend=~"a|b"}[$__rate_interval])))'
        " / on (backend) group_left sum(gateway_y_total offset 5m) > bool 1e3"
    )
    assert metric_names(expr) == {"vllm:x_bucket", "gateway_y_total"}


@dataclass(frozen=True)
class Exposed:
    gateway: frozenset[str]
    engines: frozenset[str]


def _names_in(text: str) -> set[str]:
    """Sample names a /metrics page exposes, including families declared with no sample yet."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
        "summary": ("_count", "_sum", "_created"),
    }
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(sample.name for sample in family.samples)
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
    return names


@asynccontextmanager
async def _serving(settings: Settings) -> AsyncIterator[str]:
    async with serve_asgi(build_app(build_gateway(settings))) as (url, _):
        yield url


def _in_repo(image_path: Path) -> Path:
    """The repo file a path inside the gateway image was copied from."""
    return REPO / image_path.relative_to(IMAGE_APP)


def _over_twin(urls: dict[str, str], state_dir: Path) -> Settings:
    """deploy/gateway.spark.yaml with the backends pointed at the twin engines of the same names."""
    shipped = load_settings(GATEWAY_CONFIG)
    assert set(urls) == {b.name for b in shipped.backends}
    assert shipped.policy is not None
    backends = tuple(b.model_copy(update={"url": urls[b.name]}) for b in shipped.backends)
    return shipped.model_copy(
        update={
            "backends": backends,
            "policy": _in_repo(shipped.policy),
            "state_dir": state_dir,
            "host": "127.0.0.1",
            "port": 0,
        }
    )


async def _get_text(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as response:
        assert response.status == 200, url
        return await response.text()


async def _scrape(state_dir: Path) -> Exposed:
    spec = load_fleet(TWIN_FLEET)
    # No simulated warm-up: the metric names are the same once an engine serves.
    spec = spec.model_copy(update={"engines": [e.model_copy(update={"warmup_s": 0.0}) for e in spec.engines]})
    async with TwinFleet(spec, time_scale=50.0, ephemeral_ports=True) as fleet:
        await fleet.wait_ready(timeout_s=SCRAPE_TIMEOUT_S)
        urls = {name: fleet.url(name) for name in fleet.names}
        async with _serving(_over_twin(urls, state_dir)) as gateway, aiohttp.ClientSession() as session:
            while (await session.get(gateway + "/ready")).status != 200:
                await asyncio.sleep(0.05)
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 16,
                "stream": True,
            }
            async with session.post(gateway + "/v1/chat/completions", json=body) as response:
                assert response.status == 200
                await response.read()
            gateway_text = await _get_text(session, gateway + "/metrics")
            engine_texts = [await _get_text(session, url + "/metrics") for url in urls.values()]
    engines = set().union(*(_names_in(text) for text in engine_texts))
    return Exposed(frozenset(_names_in(gateway_text)), frozenset(engines))


@pytest.fixture(scope="module")
def exposed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exposed]:
    state_dir = tmp_path_factory.mktemp("gateway-state")
    yield asyncio.run(asyncio.wait_for(_scrape(state_dir), SCRAPE_TIMEOUT_S * 2))


def test_a_twin_request_makes_the_gateway_expose_its_request_histograms(exposed: Exposed) -> None:
    histograms = {"gateway_requests_total", "gateway_ttft_seconds_bucket", "gateway_backend_ready"}
    assert histograms <= exposed.gateway
    assert "vllm:spec_decode_num_drafts_total" in exposed.engines  # the MTP twin speculates


def test_every_dashboard_metric_is_exposed_by_the_gateway_or_the_engines(
    dashboard: dict[str, Any], exposed: Exposed
) -> None:
    used = set().union(*(metric_names(_grafana_free(e)) for e in _expressions(dashboard)))
    unknown = used - exposed.gateway - exposed.engines
    assert not unknown, f"dashboard queries metrics nobody exposes: {sorted(unknown)}"


def test_dashboard_shows_every_required_metric(dashboard: dict[str, Any]) -> None:
    used = set().union(*(metric_names(_grafana_free(e)) for e in _expressions(dashboard)))
    assert used >= REQUIRED_METRICS, sorted(REQUIRED_METRICS - used)


def test_promtool_parses_every_dashboard_expression(dashboard: dict[str, Any], tmp_path: Path) -> None:
    if not Path(PROMTOOL).exists():
        pytest.skip("promtool is not installed (Debian package prometheus)")
    # Each expression as a recording rule: `promtool check rules` parses them with Prometheus' own parser.
    rules = [
        {"record": f"dashboard:expr_{i}", "expr": _grafana_free(e)}
        for i, e in enumerate(_expressions(dashboard))
    ]
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
