"""The `measurement:` section: the live windows' span and how often engines are scraped and saved."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from gateway.settings.strict import Strict
from gateway.yaml_lines import LocatedError


class MeasurementConfig(Strict):
    """Live measurement (docs/measurement.md). How adaptive routing uses it (min_samples, explore_epsilon,
    tolerance, contended_share) is the policy's: its `adaptive` block, reloaded with it."""

    window_s: float = Field(default=600.0, gt=0, description="samples older than this expire")
    scrape_interval_s: float = Field(default=1.0, gt=0, description="engine /metrics poll interval")
    snapshot_interval_s: float = Field(default=60.0, gt=0, description="live-stats.json save interval")

    @model_validator(mode="before")
    @classmethod
    def _routing_knobs_are_the_policys(cls, data: Any) -> Any:
        """A config written for an earlier version names them here: say where they went."""
        if isinstance(data, dict):
            for key in ("min_samples", "explore_epsilon"):
                if key in data:
                    message = (
                        f"moved to the policy file: set `adaptive: {{{key}: {data[key]}}}` there "
                        "(docs/policy.md; reloaded with the policy)"
                    )
                    raise LocatedError(("measurement", key), message)
        return data
