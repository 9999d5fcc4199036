"""docs/deploy.md's "In front of engines you already run" example holds: its config loads with the
gateway's settings loader, its policy loads, and every backend or tag the policy prefers or avoids is one
the config defines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.policy.load import LoadedPolicy, load_policy
from gateway.settings import Settings, load_settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"


def _yaml_blocks() -> dict[str, str]:
    """The doc's ```yaml blocks that start with a `# FILENAME` comment, by file name."""
    blocks = re.findall(r"```yaml\n# (\S+)\n(.*?)```", DOC.read_text(), re.DOTALL)
    return {name: body for name, body in blocks}


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, LoadedPolicy]:
    blocks = _yaml_blocks()
    assert {"my-gateway.yaml", "my-policy.yaml"} <= set(blocks), sorted(blocks)
    folder = tmp_path_factory.mktemp("deploy-doc")
    for name, body in blocks.items():
        (folder / name).write_text(body)
    settings = load_settings(folder / "my-gateway.yaml")
    assert settings.policy is not None and settings.policy.name == "my-policy.yaml"
    return settings, load_policy(folder / "my-policy.yaml")


def test_the_example_config_defines_pools_over_its_own_backends(
    example: tuple[Settings, LoadedPolicy],
) -> None:
    settings, _ = example
    names = {b.name for b in settings.backends}
    assert len(names) == 3
    assert all(set(pool.backends) <= names for pool in settings.pools)


def test_the_example_policy_names_only_backends_and_tags_of_the_config(
    example: tuple[Settings, LoadedPolicy],
) -> None:
    settings, loaded = example
    known = {b.name for b in settings.backends} | {tag for b in settings.backends for tag in b.tags}
    named = {name for p in loaded.policy.profiles for name in (*p.prefer, *p.avoid)}
    assert "mtp" in named and named <= known, named - known
