"""The twin's vLLM flavor against the real vLLM pair: the same requests to both, every difference listed.

A difference is allowed only when docs/twin.md names it as deliberate (the keys of DELIBERATE appear in
its "Deliberate differences from the real vLLM" section); anything else fails, so a change on either side
shows up here."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from llama_process import _poll_health
from twin_thread import twin_in_thread
from vllm_fidelity import (
    compare,
    compare_metrics,
    error_shape,
    metrics_of,
    models_shape,
    response_shape,
    stream_shape,
)
from vllm_process import CONTEXT_SIZE, NGRAM, SERVED_NAME, VllmPair

from gateway.sim.runner import TwinFleet

pytestmark = pytest.mark.real

TWIN_DOC = Path(__file__).resolve().parents[2] / "docs" / "twin.md"
WARMUP_S = 1.5
READY_TIMEOUT_S = 30.0

# Aspect -> why the twin differs on purpose; each is named in docs/twin.md. Only wording: the twin's
# messages are 0.33's as read in its source, the measured 0.32 server words a few of them differently.
DELIBERATE: dict[str, str] = {
    "error.bad_type.message": "pydantic's validation report is not reproduced",
    "error.max_tokens_over_context.message": "0.32 appends ` (parameter=max_tokens, value=N)`",
    "error.stream_options_without_stream.message": "0.32 appends ` (parameter=stream_options)`",
    "error.too_long_prompt.message": "0.32 says `at least N`, appends ` (parameter=input_tokens, value=N)`",
    "error.unknown_model.message": "0.32 appends ` Valid aliases: NAME.`",
}


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def _twin_engines(model_dir: Path) -> list[dict[str, object]]:
    common = {"flavor": "vllm", "served_model_name": SERVED_NAME, "checkpoint": str(model_dir),
              "context_length": CONTEXT_SIZE, "warmup_s": WARMUP_S}  # fmt: skip
    spec = {"method": "ngram", "k": NGRAM["num_speculative_tokens"], "acceptance": [0.6, 0.45, 0.35]}
    return [{"name": "plain", **common}, {"name": "speculative", **common, "perf": {"speculative": spec}}]


def _listening_status(port: int) -> int:
    """The status /health answers once the port listens."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        answer = _poll_health(port, timeout_s=2.0)
        if answer is not None:
            return answer[0]
        time.sleep(0.02)
    raise AssertionError("the twin never listened")


def _readiness(fleet: TwinFleet) -> dict[str, tuple[bool, int]]:
    """Per engine: (was the port refusing right after start, the status /health answered once it listened)."""
    ports = {name: _port(fleet.url(name)) for name in fleet.names}
    refused = {name: _poll_health(port, timeout_s=2.0) is None for name, port in ports.items()}
    return {name: (refused[name], _listening_status(port)) for name, port in ports.items()}


@pytest.fixture(scope="module")
def twin(vllm_pair: VllmPair) -> Iterator[tuple[TwinFleet, dict[str, tuple[bool, int]]]]:
    with twin_in_thread(_twin_engines(vllm_pair.prepared.model_dir)) as fleet:
        yield fleet, _readiness(fleet)


def _allowed(difference: str) -> bool:
    return difference.split(":", 1)[0] in DELIBERATE


def test_the_deliberate_differences_are_documented() -> None:
    text = TWIN_DOC.read_text()
    assert "## Deliberate differences from the real vLLM" in text
    assert [aspect for aspect in DELIBERATE if f"`{aspect}`" not in text] == []


def test_twin_and_real_vllm_answer_alike(
    vllm_pair: VllmPair, twin: tuple[TwinFleet, dict[str, tuple[bool, int]]]
) -> None:
    fleet, twin_ready = twin
    differences: list[str] = []
    for name, real_server in (("plain", vllm_pair.plain), ("speculative", vllm_pair.speculative)):
        real_port, twin_port = real_server.port, _port(fleet.url(name))
        real: dict[str, object] = {
            "readiness": (real_server.readiness.refused_until_s is not None, 200),
            "readiness.other_statuses": real_server.readiness.other_statuses,
        }
        mirror: dict[str, object] = {"readiness": twin_ready[name], "readiness.other_statuses": []}
        for probe in (models_shape, stream_shape, response_shape, error_shape):
            real.update(probe(real_port))
            mirror.update(probe(twin_port))
        differences += [f"[{name}] {d}" for d in compare(real, mirror)]
        differences += [
            f"[{name}] {d}" for d in compare_metrics(metrics_of(real_port), metrics_of(twin_port))
        ]
    print("\ndifferences between the twin's vLLM flavor and the real vLLM:")
    print("\n".join(differences) or "(none)")
    unexplained = [d for d in differences if not _allowed(d.split("] ", 1)[1])]
    assert unexplained == []


def test_the_real_metrics_carry_spec_decode_only_with_speculation(vllm_pair: VllmPair) -> None:
    plain, spec = metrics_of(vllm_pair.plain.port), metrics_of(vllm_pair.speculative.port)
    spec_families = {name for name in spec if name.startswith("vllm:spec_decode")}
    assert {
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    } <= spec_families
    assert not any(name.startswith("vllm:spec_decode") for name in plain)
    assert "position" in spec["vllm:spec_decode_num_accepted_tokens_per_pos_total"]
    assert {"engine", "model_name"} <= set(plain["vllm:num_requests_running"])
