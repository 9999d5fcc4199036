"""A policy against the config's backends: unknown names are errors with the closest name; a backend no
profile can reach is a warning."""

from __future__ import annotations

from gateway.policy.crosscheck import KnownBackend, cross_check
from gateway.policy.load import parse_policy
from gateway.policy.schema import Policy

SPARK = (
    KnownBackend("spark-a", frozenset({"mtp"}), pools=("qwen",)),
    KnownBackend("spark-b", pools=("qwen",), modalities=frozenset({"text"}), context_length=8192),
)


def policy(default: str, extra: str = "") -> Policy:
    text = f"version: 1\nprofiles:\n{extra}  - name: default\n{default}"
    return parse_policy(text).policy


LONG = "  - name: long\n    when: {prompt_tokens: {gt: 9000}}\n    prefer: [spark_b]\n"


def test_a_preferred_name_the_config_lacks_is_an_error_naming_the_closest_one() -> None:
    checked = cross_check(policy("    prefer: [spark-b]\n", LONG), SPARK)
    assert checked.errors == (
        (
            ("profiles", 0, "prefer", 0),
            "unknown backend or tag 'spark_b'; did you mean 'spark-b'? "
            "(backends: spark-a, spark-b; tags: mtp)",
        ),
    )


def test_names_and_tags_of_the_config_are_accepted_in_prefer_and_avoid() -> None:
    checked = cross_check(policy("    prefer: [mtp, spark-b]\n    avoid: [spark-b]\n"), SPARK)
    assert checked.errors == ()


def test_an_avoided_name_is_checked_too_and_a_typo_gets_its_near_match() -> None:
    checked = cross_check(policy("    avoid: [sprak-a]\n"), SPARK)
    ((loc, message),) = checked.errors
    assert loc == ("profiles", 0, "avoid", 0)
    assert "unknown backend or tag 'sprak-a'; did you mean 'spark-a'?" in message


def test_without_tags_the_message_speaks_of_backends_only() -> None:
    plain = (KnownBackend("spark-a", pools=("q",)), KnownBackend("spark-b", pools=("q",)))
    ((_, message),) = cross_check(policy("    prefer: [vllm-mtp]\n"), plain).errors
    assert message.startswith("unknown backend 'vllm-mtp'; did you mean 'spark-")
    assert message.endswith("(backends: spark-a, spark-b)")


def test_a_backend_every_profile_excludes_is_a_warning_with_each_reason() -> None:
    vision = "  - name: vision\n    when: {modalities: {contains: image}}\n    require: {vision: true}\n"
    checked = cross_check(policy("    avoid: [spark-b]\n", vision), SPARK)
    assert checked.errors == ()
    assert checked.warnings == (
        (
            ("profiles",),
            "no profile can reach backend 'spark-b', so it never serves: "
            "vision requires image input; default avoids 'spark-b'",
        ),
    )


def test_a_context_the_config_declares_too_small_excludes_but_an_undeclared_one_does_not() -> None:
    checked = cross_check(policy("    require: {min_context: 32768}\n"), SPARK)
    # spark-b declares 8192; spark-a declares nothing, and the engine may report enough when running.
    assert [message.split(",")[0] for _, message in checked.warnings] == [
        "no profile can reach backend 'spark-b'"
    ]
    assert "requires a context of at least 32768 (it has 8192)" in checked.warnings[0][1]


def test_a_backend_outside_every_pool_is_left_to_the_config_check() -> None:
    spare = (*SPARK, KnownBackend("spare"))
    assert cross_check(policy("    avoid: [spare]\n"), spare).warnings == ()
