"""Backends added and removed at run time (Registry.add_backend / remove_backend), and the settings of
managed engines."""

from __future__ import annotations

import pytest

from gateway.backends.registry import Registry
from gateway.settings import BackendConfig, Settings, SettingsError, load_config


def test_an_added_backend_joins_its_models_pool_or_makes_one() -> None:
    settings = Settings(
        backends=[{"name": "a", "url": "http://127.0.0.1:1"}], pools=[{"model": "m", "backends": ["a"]}]
    )
    registry = Registry(settings)
    changes: list[int] = []
    registry.membership.append(lambda: changes.append(len(registry.backends)))
    registry.add_backend(BackendConfig(name="b", url="http://127.0.0.1:2"), "m", served_name="m-served")
    registry.add_backend(BackendConfig(name="c", url="http://127.0.0.1:3"), "other")
    pool = registry.pool("m")
    assert pool is not None and pool.backends == ("a", "b") and pool.served_name("b") == "m-served"
    assert registry.model_names() == ["m", "other"]
    assert changes == [2, 3]
    with pytest.raises(ValueError):
        registry.add_backend(BackendConfig(name="c", url="http://127.0.0.1:3"), "other")


def test_a_backend_with_requests_in_flight_is_not_removed() -> None:
    registry = Registry(Settings())
    registry.add_backend(BackendConfig(name="b", url="http://127.0.0.1:2"), "m")
    registry.acquire("b")
    assert not registry.remove_backend("b")
    registry.release("b")
    assert registry.remove_backend("b")
    assert "b" not in registry.backends and registry.pool("m") is None


def test_an_engine_larger_than_its_device_or_named_like_a_backend_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "gateway.yaml"
    engine = "{name: big, model: m, image: i, port: 9000, memory_gib: 130}"
    config.write_text(f"devices: {{spark: {{memory_gib: 119}}}}\nengines:\n  - {engine}\n")
    with pytest.raises(SettingsError, match=r"engines.0.memory_gib: 130 GiB is over device 'spark'"):
        load_config(config)
    clash = "backends: [{name: big, url: 'http://127.0.0.1:1'}]\n"
    config.write_text(clash + f"engines:\n  - {engine}\n")
    with pytest.raises(SettingsError, match=r"engines.0.name: name 'big' is already a backend's"):
        load_config(config)
