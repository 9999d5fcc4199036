"""The soak's own settings keep a request's longest configured wait under its watchdog, so a request it
counts as hung is a fault of the gateway, never a wait its settings allow."""

from __future__ import annotations

from gateway.app import first_content_s
from gateway.bench import soak
from gateway.bench.soak_load import WATCHDOG_S
from gateway.settings import Settings


def test_a_requests_whole_time_for_its_first_content_is_under_the_watchdog() -> None:
    settings = Settings(**soak._gateway_config({"e0": "http://127.0.0.1:1", "e1": "http://127.0.0.1:2"}))
    assert first_content_s(settings) <= WATCHDOG_S - 10  # and a short stream after its first content
