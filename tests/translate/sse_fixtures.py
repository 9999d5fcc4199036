"""Helpers for the translation tests: reading the SSE fixtures and parsing Anthropic event streams."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"


def data_payloads(name: str) -> list[bytes]:
    """The `data:` payloads of a chat SSE fixture, as a gateway's SSE reader hands them on."""
    raw = (FIXTURES / name).read_bytes()
    return [block[len(b"data: ") :] for block in raw.split(b"\n\n") if block.startswith(b"data: ")]


def anthropic_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """Parse `event: X\\ndata: {...}` blocks strictly; the event name must equal the data's type."""
    events: list[tuple[str, dict[str, Any]]] = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        name_line, data_line = block.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: "), block
        name, data = name_line[len("event: ") :], json.loads(data_line[len("data: ") :])
        assert data["type"] == name, block
        events.append((name, data))
    return events


def fixture_events(name: str) -> list[tuple[str, dict[str, Any]]]:
    return anthropic_events((FIXTURES / name).read_bytes())
