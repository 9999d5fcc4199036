"""The compose file's vLLM engines accept tool calls: without `--enable-auto-tool-choice` and the tool
call parser of the served model's family, vLLM answers 400 to every request with tool_choice "auto"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "deploy" / "compose.spark.yaml"

# The parser that reads each family's tool-call format: Qwen3.5/3.6 write the Qwen3-Coder XML format
# (<tool_call><function=...><parameter=...>), Qwen2.5 and Qwen3 the JSON format `hermes` reads.
PARSERS = {
    "Qwen/Qwen3.6-": "qwen3_coder",
    "Qwen/Qwen3.5-": "qwen3_coder",
    "Qwen/Qwen3-Coder": "qwen3_coder",
    "Qwen/Qwen3-": "hermes",
    "Qwen/Qwen2.5-": "hermes",
}


def _vllm_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load(COMPOSE.read_text())["services"]
    return {name: s for name, s in services.items() if "vllm" in str(s.get("image", ""))}


def _parser_for(model: str) -> str:
    # The longest matching prefix wins: "Qwen/Qwen3-Coder" before "Qwen/Qwen3-".
    prefixes = sorted((p for p in PARSERS if model.startswith(p)), key=len, reverse=True)
    assert prefixes, f"no known tool call parser for {model}"
    return PARSERS[prefixes[0]]


def _flags(command: list[str]) -> dict[str, str]:
    flags = {}
    for arg in command:
        if arg.startswith("--"):
            name, _, value = arg[2:].partition("=")
            flags[name] = value
    return flags


def test_the_parser_table_prefers_the_most_specific_family() -> None:
    assert _parser_for("Qwen/Qwen3-Coder-30B-A3B-Instruct") == "qwen3_coder"
    assert _parser_for("Qwen/Qwen3-8B") == "hermes"
    assert _parser_for("Qwen/Qwen3.6-35B-A3B-FP8") == "qwen3_coder"


def test_the_compose_file_has_vllm_engines() -> None:
    assert set(_vllm_services()) == {"vllm-base", "vllm-mtp"}


@pytest.mark.parametrize("name", sorted(_vllm_services()))
def test_every_vllm_engine_enables_tool_calls_with_its_models_parser(name: str) -> None:
    command = _vllm_services()[name]["command"]
    flags = _flags(command)
    assert "enable-auto-tool-choice" in flags, name
    assert flags.get("tool-call-parser") == _parser_for(command[0]), (name, command[0])
