"""Loading policy text: line-numbered errors that name the file, the location and the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.policy.crosscheck import KnownBackend
from gateway.policy.load import PolicyError, load_policy, parse_policy

GOOD = """\
version: 1
profiles:
  - name: long
    when:
      prompt_tokens: {gt: 8192}
    prefer: [a]
  - name: default
"""


def test_valid_text_loads_with_its_hash_and_summary() -> None:
    loaded = parse_policy(GOOD, "p.yaml")
    assert [p.name for p in loaded.policy.profiles] == ["long", "default"]
    assert len(loaded.sha256) == 64
    assert "2 profiles (long, default)" in loaded.summary()


def test_a_misspelt_condition_names_its_line_and_location() -> None:
    text = GOOD.replace("prompt_tokens:", "prompt_tokenz:")
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "policies/x.yaml")
    assert info.value.lines() == [
        "policies/x.yaml:5: profiles.0.when.prompt_tokenz: unknown field "
        "(check the spelling; `spark-gateway schema` lists the fields)"
    ]


def test_a_bad_value_points_at_its_own_line() -> None:
    text = GOOD.replace("{gt: 8192}", "{gt: lots}")
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "x.yaml")
    (line,) = info.value.lines()
    assert line.startswith("x.yaml:5: profiles.0.when.prompt_tokens.gt: ")


def test_a_missing_default_profile_is_reported_at_the_profiles_key() -> None:
    text = GOOD.replace("  - name: default\n", "")
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "x.yaml")
    assert info.value.issues[0].line == 2
    assert "named default" in info.value.issues[0].message


def test_yaml_syntax_errors_carry_their_line() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(GOOD + "  - name: [unclosed\n", "x.yaml")
    assert info.value.issues[0].line == 9
    assert "invalid YAML" in info.value.issues[0].message


def test_duplicate_keys_are_refused_instead_of_silently_dropped() -> None:
    text = GOOD.replace("    prefer: [a]\n", "    prefer: [a]\n    prefer: [b]\n")
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "x.yaml")
    assert info.value.lines() == ["x.yaml:7: profiles.0.prefer: duplicate key"]


def test_a_non_mapping_document_is_refused() -> None:
    with pytest.raises(PolicyError, match="a policy is a mapping"):
        parse_policy("- just\n- a list\n", "x.yaml")


def test_an_unreadable_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")


def test_the_hash_is_of_the_file_bytes_even_with_crlf(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(GOOD.replace("\n", "\r\n").encode())
    import hashlib

    assert load_policy(path).sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


KNOWN = (KnownBackend("a", pools=("m",)), KnownBackend("b", pools=("m",)))


def test_with_the_configs_backends_an_unknown_name_is_refused_at_its_line() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(GOOD.replace("prefer: [a]", "prefer: [c]"), "x.yaml", KNOWN)
    assert info.value.lines() == [
        "x.yaml:6: profiles.0.prefer.0: unknown backend 'c'; did you mean 'a'? (backends: a, b)"
    ]


def test_without_the_configs_backends_names_are_not_checked() -> None:
    assert parse_policy(GOOD.replace("prefer: [a]", "prefer: [c]"), "x.yaml").warnings == ()


def test_cross_check_warnings_are_kept_with_their_line_and_do_not_refuse() -> None:
    text = GOOD + "    avoid: [b]\n"  # only `default` avoids b: `long` still reaches it
    assert parse_policy(text, "x.yaml", KNOWN).warnings == ()
    text = GOOD.replace("    prefer: [a]\n", "    prefer: [a]\n    avoid: [b]\n") + "    avoid: [b]\n"
    loaded = parse_policy(text, "x.yaml", KNOWN)
    assert loaded.warning_lines() == [
        "x.yaml:2: warning: profiles: no profile can reach backend 'b', so it never serves: "
        "long avoids 'b'; default avoids 'b'"
    ]
