"""Classification: the first profile whose `when` conditions all hold names the request's workload."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from gateway.policy.schema import NumberCondition, Policy, Profile, SetCondition, StringCondition, When
from gateway.records import Features
from gateway.routing.request.features import needed_tokens

Condition = NumberCondition | SetCondition | StringCondition | bool
Value = float | int | str | bool | frozenset[str] | None


@dataclass(frozen=True, slots=True)
class Classification:
    profile: Profile
    why: str  # the conditions that matched, or why the default caught it
    skipped: tuple[tuple[str, str], ...] = ()  # (earlier profile, the condition that did not hold)


def classify(policy: Policy, features: Features) -> Profile:
    """The hot path: the matching profile only (the default profile always matches)."""
    return next(p for p in policy.profiles if p.when is None or matches(p.when, features))


def classify_explained(policy: Policy, features: Features) -> Classification:
    """The same decision as `classify`, with the reasons, for explain."""
    skipped: list[tuple[str, str]] = []
    for profile in policy.profiles:
        if profile.when is None:
            return Classification(
                profile, "no earlier profile matched; default catches the rest", tuple(skipped)
            )
        failed = next((c for c in _conditions(profile.when, features) if not _holds(c[1], c[2])), None)
        if failed is None:
            why = "; ".join(_describe(*c) for c in _conditions(profile.when, features))
            return Classification(profile, why, tuple(skipped))
        skipped.append((profile.name, _describe(*failed, holds=False)))
    raise AssertionError("a validated policy ends with a default profile")


def matches(when: When, features: Features) -> bool:
    return all(_holds(value, cond) for _, value, cond in _conditions(when, features))


def _conditions(when: When, f: Features) -> Iterator[tuple[str, Value, Condition]]:
    """(feature name, its value for this request, the condition) for every condition given."""
    values: dict[str, Value] = {
        "prompt_tokens": f.prompt_tokens,
        "max_output_tokens": f.max_output_tokens,
        "total_tokens": needed_tokens(f),
        "pool_inflight": f.pool_inflight,
        "temperature": f.temperature,
        "repetition": f.repetition,
        "n": f.n,
        "modalities": f.modalities,
        "model": f.model,
        "endpoint": f.endpoint,
        "response_format": f.response_format or "none",
        "tools": f.tools,
        "stream": f.stream,
    }
    for name, value in values.items():
        cond = getattr(when, name)
        if cond is not None:
            yield name, value, cond


def _holds(value: Value, cond: Condition) -> bool:
    if isinstance(cond, bool):
        return value is cond
    if isinstance(cond, NumberCondition):
        return isinstance(value, int | float) and not isinstance(value, bool) and _compare(value, cond)
    if isinstance(cond, SetCondition):
        return isinstance(value, frozenset) and _set_holds(value, cond)
    return (
        isinstance(value, str)
        and (cond.in_ is None or value in cond.in_)
        and (cond.not_in is None or value not in cond.not_in)
    )


def _compare(x: float, c: NumberCondition) -> bool:
    return (
        (c.gt is None or x > c.gt)
        and (c.gte is None or x >= c.gte)
        and (c.lt is None or x < c.lt)
        and (c.lte is None or x <= c.lte)
        and (c.eq is None or x == c.eq)
    )


def _set_holds(value: frozenset[str], c: SetCondition) -> bool:
    return (
        (c.contains is None or _as_set(c.contains) <= value)
        and (c.contains_any is None or bool(value & set(c.contains_any)))
        and (c.excludes is None or not value & _as_set(c.excludes))
        and (c.in_ is None or value <= set(c.in_))
    )


def _as_set(value: str | Sequence[str]) -> set[str]:
    return {value} if isinstance(value, str) else set(value)


def _describe(name: str, value: Value, cond: Condition, holds: bool = True) -> str:
    verb = "satisfies" if holds else "does not satisfy"
    return f"{name}={_plain(value)} {verb} {_wanted(cond)}"


def _wanted(cond: Condition) -> str:
    if isinstance(cond, bool):
        return _plain(cond)
    tests = cond.model_dump(by_alias=True, exclude_none=True)
    return "{" + ", ".join(f"{op}: {_plain(v)}" for op, v in tests.items()) + "}"


def _plain(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, frozenset | set | list):
        return "[" + ", ".join(sorted(str(v) for v in value)) + "]"
    return str(value)
