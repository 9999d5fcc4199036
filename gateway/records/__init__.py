"""Plain records shared by every layer: what a request looks like (Features), what a backend looks like
(BackendSnapshot) and what its engine reports (EngineHint), what the router decided (Candidate, Refusal,
Decision, ExplorationPlan, Spill), what happened to a request (RequestRecord), the measurement kept of it
(Sample) and what requests still in flight show so far (InFlight,
Progress).

The bottom of the layering (docs/ARCHITECTURE.md): these modules import nothing of the gateway, so routing
and policy work on plain data and every other package can hand it to them. No framework objects here.
"""

from gateway.records.backend import BackendSnapshot
from gateway.records.decision import Candidate, Decision, ExplorationPlan, Refusal, Spill
from gateway.records.engine_hint import EngineHint
from gateway.records.features import Features
from gateway.records.progress import InFlight, Progress
from gateway.records.request_record import RequestRecord
from gateway.records.sample import Sample

__all__ = [
    "BackendSnapshot",
    "Candidate",
    "Decision",
    "EngineHint",
    "ExplorationPlan",
    "Features",
    "InFlight",
    "Progress",
    "Refusal",
    "RequestRecord",
    "Sample",
    "Spill",
]
