"""What the control-plane calls (readiness probes, /metrics scrapes) say about an engine besides their own
results: it answered (its server runs), or it left a call unanswered for so many seconds.

The prober and the scraper report both to a `ControlPlaneListener` the composition root hands them (the
hang watch, proxy/stall.py): a stopped process answers nothing, while a busy engine still answers its
health endpoint, so a backend with requests in flight whose control plane falls silent is suspect long
before the prober calls it dead. The scraper also says whether the engine's own progress counters moved:
an engine that computes is slow, not stalled, whatever its requests hear. A plain protocol, so backends
never import the proxy layer.
"""

from __future__ import annotations

from typing import Protocol


class ControlPlaneListener(Protocol):
    def control_answered(self, backend: str) -> None:
        """A probe or scrape of `backend` got an HTTP answer (any status)."""

    def control_unanswered(self, backend: str, waited_s: float) -> None:
        """A probe or scrape of `backend` got no answer within `waited_s` (it timed out)."""

    def engine_progress(self, backend: str, moved: bool) -> None:
        """A /metrics scrape of `backend` read the engine's progress counters; `moved`: they changed since
        the previous scrape (the engine computed meanwhile)."""
