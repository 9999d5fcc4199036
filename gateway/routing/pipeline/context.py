"""What every filter and scorer sees about the request being routed: its features and its profile."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.policy.schema import Adaptive, Profile, RoutingMode, Weights
from gateway.records import Features


@dataclass(frozen=True, slots=True)
class RouteContext:
    features: Features
    profile: Profile
    routing: RoutingMode  # the profile's override, else the policy's default
    weights: Weights
    adaptive: Adaptive = Adaptive()  # the policy's adaptive knobs (used by the objective scorer)

    @property
    def pool(self) -> str:
        return self.features.model
