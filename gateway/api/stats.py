"""GET /gateway/stats: the live windows per backend x profile, speculative acceptance per backend and how
fresh each backend's engine /metrics scrape is (docs/measurement.md)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import orjson

from gateway.api.asgi import Receive, Scope, Send, send_bytes
from gateway.backends.scraper import MetricsScraper
from gateway.stats.live import LiveRecorder

_JSON = [(b"content-type", b"application/json")]


def stats_document(recorder: LiveRecorder, scraper: MetricsScraper | None) -> dict[str, Any]:
    """{"window", "backends": {backend: {profile: summary}}, "engines": {backend: scrape view}}."""
    document = recorder.to_dict()
    document["engines"] = {} if scraper is None else _engines(scraper)
    return document


def _engines(scraper: MetricsScraper) -> dict[str, Any]:
    now = scraper.now()
    engines: dict[str, Any] = {}
    for backend in scraper.backends():
        result = scraper.latest(backend)
        view: dict[str, Any] = {
            "fresh": scraper.is_fresh(backend, now),
            "age_s": None if result is None else round(result.age(now), 3),
            "stale_after_s": scraper.stale_after_s,
            "last_error": scraper.last_error(backend),
        }
        if result is not None:
            m = result.metrics
            view.update(running=m.running, waiting=m.waiting, kv_usage=m.kv_usage)
            view["acceptance"] = None if result.acceptance is None else asdict(result.acceptance)
            view["acceptance_total"] = (
                None if result.acceptance_total is None else asdict(result.acceptance_total)
            )
        engines[backend] = view
    return engines


class Stats:
    def __init__(self, recorder: LiveRecorder, scraper: MetricsScraper | None) -> None:
        self.recorder = recorder
        self.scraper = scraper

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = orjson.dumps(stats_document(self.recorder, self.scraper))
        await send_bytes(send, 200, body, _JSON)
