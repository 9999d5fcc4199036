"""The explain outcome: the router's decision followed to what the client would get (served at once,
refused at once, or a wait for a warm-up and how it ends)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.api.outlook import Outlook
from gateway.backends.registry import Registry, Status
from gateway.backends.warmup import Warmups
from gateway.policy.load import PolicyWatcher
from gateway.proxy.reliability import Reliability
from gateway.routing.pipeline.router import PolicyRouter
from gateway.settings import Settings

POLICY = "version: 1\nprofiles:\n  - name: default\n    prefer: [a]\n"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def outcome(tmp_path: Path, status: Status, body: dict[str, Any] = CHAT, warmup_s: float = 300.0) -> Any:
    settings = Settings(
        backends=[{"name": "a", "url": "http://127.0.0.1:1", "warmup_s": warmup_s}],
        pools=[{"model": "m", "backends": ["a"]}],
        queue={"timeout_s": 5.0, "warming_wait_s": 30.0},
        probe={"startup_grace_s": 600.0},
    )
    registry = Registry(settings)
    warmups = Warmups(registry, None)
    registry.listeners.append(warmups.on_status)
    registry.set_status("a", status)
    (tmp_path / "policy.yaml").write_text(POLICY)
    router = PolicyRouter(PolicyWatcher(tmp_path / "policy.yaml"))
    snapshots = registry.snapshots(registry.pools[0])
    explanation = router.explain("chat", body, snapshots)
    return Outlook(Reliability(settings, warmups))("m", explanation)


def test_a_ready_backend_serves_at_once(tmp_path: Path) -> None:
    got = outcome(tmp_path, Status.READY)
    assert (got["action"], got["backend"], got["refusal"]) == ("serve", "a", None)


def test_a_warm_up_longer_than_the_wait_ends_in_backends_warming_with_the_time_left_then(
    tmp_path: Path,
) -> None:
    got = outcome(tmp_path, Status.STARTING)
    assert got["action"] == "wait" and got["waits_for"] == "warm_up" and got["wait_s"] == 30.0
    assert (
        got["summary"]
        == "waits 30 s (every backend that could serve it is warming up), then 503 backends_warming"
    )
    assert got["refusal"]["code"] == "backends_warming"
    assert got["refusal"]["retry_after"] == 270  # 300 s expected, less the 30 s it will have waited
    assert 299.0 < got["eta_s"] <= 300.0


def test_a_warm_up_within_the_wait_is_expected_to_be_served(tmp_path: Path) -> None:
    got = outcome(tmp_path, Status.STARTING, warmup_s=12.0)
    assert got["action"] == "wait" and got["backend"] == "a"
    assert got["summary"].startswith("waits for a to finish warming up (expected in 12 s), then is served")
    assert got["refusal"]["code"] == "backends_warming"  # only if it is not ready within the wait


@pytest.mark.parametrize(
    ("status", "body", "code"),
    [
        (Status.DEAD, CHAT, "no_ready_backend"),  # never served, given up: nothing to wait for
        (
            Status.STARTING,
            {
                **CHAT,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
                        ],
                    }
                ],
            },
            "unsupported_modality",
        ),
    ],
)
def test_a_refusal_with_nothing_to_wait_for_is_immediate(
    tmp_path: Path, status: Status, body: dict[str, Any], code: str
) -> None:
    got = outcome(tmp_path, status, body)
    assert got["action"] == "refuse" and got["refusal"]["code"] == code and got["wait_s"] == 0.0
