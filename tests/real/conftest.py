"""Fixtures for the real-engine suite: a pair of llama-server processes built from source, one plain and
one with n-gram speculative decoding, serving the real Gemma 3 270M GGUF on 127.0.0.1.

Both servers live for the whole session and are always stopped at its end (SIGTERM, then SIGKILL).
The suite is skipped only when the build tools are missing on a developer machine; under CI (``CI`` set)
a missing tool is an error, because the suite must run there.

The vLLM pair (``vllm_pair``: tests/real/vllm_prep.py, vllm_process.py) is skipped, with the reason, wherever
vLLM cannot be prepared (no package index, too little memory, a failed install); once prepared, a server that
does not start is a failure. ``vllm_gateway`` serves the gateway in front of it, one per test module, with
that module's ``vllm_policy`` (a module overrides the fixture to route its own way).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_fleet import EnginePair, running_pair
from gateway_harness import RunningGateway, pair_settings, serving, wait_until_ready, write_policy
from gguf_model import ensure_gemma_gguf
from llama_build import BuildToolsMissing, BuiltServer, ensure_llama_server
from llama_process import LlamaServer
from vllm_gateway import vllm_pair_settings
from vllm_prep import PreparedVllm, VllmUnavailable, ensure_vllm
from vllm_process import VllmPair, VllmStartError, running_vllm_pair


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before the first test, the long preparations the selected real tests need (tests/real/prep_step.py),
    announced with their time estimates and followed, on the terminal whatever the capture mode."""
    if session.config.option.collectonly:
        return
    needs = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    want_llama, want_vllm = "llama_server_build" in needs, "vllm_prepared" in needs
    if not (want_llama or want_vllm):
        return
    from prep_step import prepare

    config = session.config
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")

    def say(line: str) -> None:
        if reporter is None:
            return
        if capture is None:
            reporter.write_line(line)
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)

    prepare(say, want_llama, want_vllm, ensure_gemma_gguf)


@pytest.fixture(scope="session")
def llama_server_build() -> BuiltServer:
    try:
        return ensure_llama_server()
    except BuildToolsMissing as missing:
        if os.environ.get("CI"):
            pytest.fail(f"{missing} (the real suite must run in CI)")
        pytest.skip(str(missing))


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    return ensure_gemma_gguf()


@pytest.fixture(scope="session")
def engine_pair(
    llama_server_build: BuiltServer, gemma_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EnginePair]:
    with running_pair(llama_server_build, gemma_gguf, tmp_path_factory.mktemp("llama-server-logs")) as pair:
        yield pair


@pytest.fixture(scope="session")
def plain_engine(engine_pair: EnginePair) -> LlamaServer:
    return engine_pair.plain


@pytest.fixture(scope="session")
def spec_engine(engine_pair: EnginePair) -> LlamaServer:
    return engine_pair.speculative


@pytest.fixture(scope="session")
def gateway_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_policy(tmp_path_factory.mktemp("gateway-policy"))


@pytest.fixture(scope="session")
def pair_gateway(engine_pair: EnginePair, gateway_policy: Path) -> Iterator[RunningGateway]:
    """The gateway in front of the real pair: pool `gemma` (both), `gemma-plain`, `gemma-spec` (one each)."""
    settings = pair_settings(engine_pair.plain.base_url, engine_pair.speculative.base_url, gateway_policy)
    with serving(settings) as running:
        wait_until_ready(running)
        yield running


@pytest.fixture(scope="session")
def vllm_prepared(gemma_gguf: Path) -> PreparedVllm:
    """The vLLM venv and converted model (tests/real/vllm_prep.py); a skip naming why when impossible here."""
    try:
        return ensure_vllm(gemma_gguf)
    except VllmUnavailable as unavailable:
        pytest.skip(f"real vLLM unavailable: {unavailable}")


@pytest.fixture(scope="session")
def vllm_pair(vllm_prepared: PreparedVllm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmPair]:
    """Two real vLLM servers for the session, plain and n-gram speculative. A prepared server that fails
    to start is a failure, not a skip."""
    log_dir = tmp_path_factory.mktemp("vllm-logs")
    try:
        with running_vllm_pair(vllm_prepared, log_dir) as pair:
            yield pair
    except VllmStartError as error:
        pytest.fail(str(error))


@pytest.fixture(scope="module")
def vllm_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The policy of `vllm_gateway`: the minimal one, unless the test module overrides this fixture."""
    return write_policy(tmp_path_factory.mktemp("vllm-gateway-policy"))


@pytest.fixture(scope="module")
def vllm_gateway(vllm_pair: VllmPair, vllm_policy: Path) -> Iterator[RunningGateway]:
    """The gateway in front of the real vLLM pair (tests/real/vllm_gateway.py), per module: each module's
    gateway starts with its own policy and no samples."""
    settings = vllm_pair_settings(vllm_pair.plain.base_url, vllm_pair.speculative.base_url, vllm_policy)
    with serving(settings) as running:
        wait_until_ready(running)
        yield running
