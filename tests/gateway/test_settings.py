"""Settings: YAML file, environment on top, errors that name file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.settings import SettingsError, default_state_dir, load_config, load_settings

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


def test_credentials_in_the_url_and_an_api_key_are_refused_at_the_key_line(tmp_path: Path) -> None:
    # Both would make two Authorization headers: the HTTP client refuses the pair, so the engine was
    # never reached and the backend stayed "unknown" forever.
    text = GOOD.replace("url: http://127.0.0.1:8102", "url: http://gw:pw-SECRET@127.0.0.1:8102")
    path = write(tmp_path, text.replace("    context_length: 8192\n", "    api_key: sk-engine\n"))
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert len(caught.value.lines) == 1
    line = caught.value.lines[0]
    assert line.startswith(f"{path}:10: backends.1.api_key: ")
    assert "credentials in the backend's url" in line
    assert "pw-SECRET" not in line and "sk-engine" not in line  # the error quotes neither secret


def test_credentials_in_the_url_alone_or_a_key_alone_load(tmp_path: Path) -> None:
    text = GOOD.replace("url: http://127.0.0.1:8102", "url: http://gw:pw-SECRET@127.0.0.1:8102")
    backend = load_settings(write(tmp_path, text)).backend("b")
    assert backend.url == "http://gw:pw-SECRET@127.0.0.1:8102"
    assert "pw-SECRET" not in repr(backend) and "http://127.0.0.1:8102" in repr(backend)
    keyed = GOOD.replace("    context_length: 8192\n", "    api_key: sk-engine\n")
    settings = load_settings(write(tmp_path, keyed))
    assert settings.backend("b").api_key == "sk-engine"
    assert "sk-engine" not in repr(settings.backend("b"))


def test_unknown_field_is_reported_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("    flavor: vllm\n", "    flavour: vllm\n"))
    with pytest.raises(SettingsError, match=rf"{path}:6: backends.0.flavour: unknown field \(check"):
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


def test_relative_paths_resolve_against_the_config_folder_from_any_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "etc"
    folder.mkdir()
    path = write(folder, GOOD + "policy: policies/p.yaml\nstate_dir: state\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    settings = load_settings(Path("..") / "etc" / "gateway.yaml")
    assert settings.policy is not None and settings.state_dir is not None
    assert settings.policy.resolve() == folder / "policies" / "p.yaml"
    assert settings.state_dir.resolve() == folder / "state"
    assert load_settings(path).policy == folder / "policies" / "p.yaml"


def test_absolute_and_home_relative_paths_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = write(tmp_path, GOOD + "policy: /srv/p.yaml\nstate_dir: ~/state\n")
    settings = load_settings(path)
    assert (settings.policy, settings.state_dir) == (Path("/srv/p.yaml"), tmp_path / "home" / "state")


def test_paths_from_the_environment_are_the_process_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARK_GATEWAY_POLICY", "policies/p.yaml")
    assert load_settings(write(tmp_path, GOOD)).policy == Path("policies/p.yaml")


def test_a_config_without_state_dir_gets_a_folder_of_its_own_in_the_user_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = load_settings(write(tmp_path / "a", GOOD)), load_settings(write(tmp_path / "b", GOOD))
    assert first.state_dir is not None and second.state_dir is not None
    assert first.state_dir.parent == tmp_path / "cache" / "spark-gateway"
    assert first.state_dir.name.startswith("gateway-") and first.state_dir != second.state_dir
    monkeypatch.chdir(tmp_path / "a")  # the same file by another spelling: the same folder
    assert (
        load_settings("gateway.yaml").state_dir
        == first.state_dir
        == default_state_dir(tmp_path / "a" / "gateway.yaml")
    )


def test_state_dir_null_keeps_no_state_and_no_file_means_none(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, GOOD + "state_dir: null\n")).state_dir is None
    assert load_settings(None).state_dir is None


def test_a_model_name_given_twice_is_refused_at_the_second_one(tmp_path: Path) -> None:
    text = GOOD + "  - model: other\n    aliases: [q]\n    backends: [a]\n"
    path = write(tmp_path, text)
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert caught.value.lines == [
        f"{path}:18: pools.1.aliases.0: model name 'q' is already an alias of pool 'qwen' (pools.0.aliases.0)"
    ]


def test_an_alias_repeating_its_pools_model_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("aliases: [q]", "aliases: [q, qwen]"))
    with pytest.raises(
        SettingsError, match=rf"{path}:14: pools.0.aliases.1: model name 'qwen' is already the model"
    ):
        load_settings(path)


def test_a_backend_name_given_twice_is_refused_at_the_second_one(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("  - name: b\n", "  - name: a\n"))
    with pytest.raises(SettingsError, match=rf"{path}:7: backends.1.name: backend name 'a' is already used"):
        load_settings(path)


def test_a_backend_in_no_pool_is_a_warning(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("backends: [a, b]", "backends: [a]").replace("{b: qwen-gguf}", "{}"))
    loaded = load_config(path)
    assert loaded.warnings == (
        f"{path}:7: warning: backends.1: backend 'b' is in no pool, so no request can reach it",
    )


def test_adaptive_knobs_in_the_measurement_section_point_to_the_policy(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "measurement:\n  window_s: 300\n  explore_epsilon: 0.1\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    [line] = caught.value.lines
    assert line.startswith(f"{path}:")
    moved = "measurement.explore_epsilon: moved to the policy file: set `adaptive: {explore_epsilon: 0.1}`"
    assert moved in line
