"""Settings: YAML file, environment on top, errors that name file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.settings import SettingsError, load_settings

GOOD = """\
host: 0.0.0.0
port: 9000
backends:
  - name: a
    url: http://127.0.0.1:8101/
    flavor: vllm
  - name: b
    url: http://127.0.0.1:8102
    flavor: llamacpp
    context_length: 8192
    modalities: [text, image]
pools:
  - model: qwen
    aliases: [q]
    backends: [a, b]
    served_names: {b: qwen-gguf}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    return path


def test_file_values_are_loaded(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, GOOD))
    assert settings.port == 9000
    assert settings.backends[0].url == "http://127.0.0.1:8101"  # trailing slash dropped
    assert settings.pools[0].served_name("b") == "qwen-gguf"
    assert settings.pools[0].served_name("a") == "qwen"
    assert settings.backend("b").modalities == frozenset({"text", "image"})


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_GATEWAY_PORT", "9100")
    monkeypatch.setenv("SPARK_GATEWAY_TIMEOUTS__CONNECT_S", "1.5")
    settings = load_settings(write(tmp_path, GOOD))
    assert settings.port == 9100
    assert settings.timeouts.connect_s == 1.5
    assert settings.timeouts.first_byte_s == 600.0


def test_error_names_file_line_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("flavor: llamacpp", "flavor: tgi"))
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert caught.value.lines == [
        f"{path}:9: backends.1.flavor: Input should be 'vllm', 'sglang', 'llamacpp' or 'openai'"
    ]


def test_unknown_field_is_reported_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("    flavor: vllm\n", "    flavour: vllm\n"))
    with pytest.raises(SettingsError, match=rf"{path}:6: backends.0.flavour: Extra inputs"):
        load_settings(path)


def test_pool_naming_an_unknown_backend_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("backends: [a, b]", "backends: [a, c]"))
    with pytest.raises(SettingsError, match="unknown backend 'c'"):
        load_settings(path)


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "port: 1\nbackends: [\n")
    with pytest.raises(SettingsError, match=rf"{path}:3"):
        load_settings(path)


def test_no_file_gives_defaults() -> None:
    settings = load_settings(None)
    assert (settings.host, settings.port, settings.probe.startup_grace_s) == ("127.0.0.1", 8080, 600.0)
