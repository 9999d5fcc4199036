"""A policy checked against the backends of the gateway config it serves.

A profile names backends, or tags of backends, in `prefer` and `avoid` (`require` asks for capabilities,
not names). A name the config does not define matches no backend, silently: a policy written for
backends `fp8-mtp`/`fp8-base` over a config naming them `spark-a`/`spark-b` scores every backend 0 and
sends everything to the first one. So an unknown name is an error, reported at its line with the closest
name the config does define; the gateway refuses to start on it and a hot reload refuses the edit.

A pool backend that every profile excludes (it avoids the backend, or requires what the backend's config
declares it lacks) is a warning, not an error: parking a backend with `avoid` while it is rebuilt is a
legitimate edit, and a hot reload must accept it.

Plain data in, plain data out: the config's backends arrive as `KnownBackend`s, the findings leave as
(location in the policy document, message) pairs that the loader maps to lines.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.policy.schema import Policy, Profile
from gateway.yaml_lines import Loc

Finding = tuple[Loc, str]  # (location inside the policy document, message)


@dataclass(frozen=True, slots=True)
class KnownBackend:
    """What the cross-check needs to know of one configured backend."""

    name: str
    tags: frozenset[str] = frozenset()
    pools: tuple[str, ...] = ()  # model names of the pools it serves in
    modalities: frozenset[str] | None = None  # as declared in the config; None: discovered when running
    context_length: int | None = None  # as declared in the config; None: discovered when running


@dataclass(frozen=True, slots=True)
class CrossCheck:
    errors: tuple[Finding, ...]
    warnings: tuple[Finding, ...]


def cross_check(policy: Policy, backends: Sequence[KnownBackend]) -> CrossCheck:
    return CrossCheck(tuple(_unknown_names(policy, backends)), tuple(_unreachable(policy, backends)))


def _unknown_names(policy: Policy, backends: Sequence[KnownBackend]) -> list[Finding]:
    names = [b.name for b in backends]
    tags = sorted({tag for b in backends for tag in b.tags} - set(names))
    known = {*names, *tags}
    findings: list[Finding] = []
    for i, profile in enumerate(policy.profiles):
        for field, entries in (("prefer", profile.prefer), ("avoid", profile.avoid)):
            findings += [
                (("profiles", i, field, j), _unknown(entry, names, tags))
                for j, entry in enumerate(entries)
                if entry not in known
            ]
    return findings


def _unknown(entry: str, names: list[str], tags: list[str]) -> str:
    what = "backend or tag" if tags else "backend"
    closest = _closest(entry, [*names, *tags])
    hint = f"; did you mean {closest!r}?" if closest is not None else ""
    listing = f"backends: {', '.join(names) or 'none'}" + (f"; tags: {', '.join(tags)}" if tags else "")
    return f"unknown {what} {entry!r}{hint} ({listing})"


def _closest(word: str, candidates: list[str]) -> str | None:
    """The most similar candidate however far (the message lists them all anyway, and when a fleet's names
    are all new a guess still helps), the first in config order on a tie: difflib.get_close_matches
    picks the alphabetically last, which reads as arbitrary."""
    scores = [difflib.SequenceMatcher(None, word, candidate).ratio() for candidate in candidates]
    return candidates[scores.index(max(scores))] if candidates else None


def _unreachable(policy: Policy, backends: Sequence[KnownBackend]) -> list[Finding]:
    findings: list[Finding] = []
    for backend in backends:
        if not backend.pools:
            continue  # outside every pool: the config check reports it, whatever the policy says
        reasons = [_excluded(profile, backend) for profile in policy.profiles]
        if all(reasons):
            why = "; ".join(f"{p.name} {r}" for p, r in zip(policy.profiles, reasons, strict=True))
            findings.append(
                (("profiles",), f"no profile can reach backend {backend.name!r}, so it never serves: {why}")
            )
    return findings


def _excluded(profile: Profile, backend: KnownBackend) -> str | None:
    """Why this profile never routes to the backend, or None. The same rules as routing/pipeline/filters.py,
    on declared capabilities only: an undeclared one is discovered later and may well fit."""
    hit = next((a for a in profile.avoid if a == backend.name or a in backend.tags), None)
    if hit is not None:
        return f"avoids {hit!r}"
    require = profile.require
    if backend.modalities is not None:
        missing = sorted(require.needed_modalities() - backend.modalities)
        if missing:
            return f"requires {'/'.join(missing)} input"
    small = backend.context_length is not None and backend.context_length < (require.min_context or 0)
    if small:
        return f"requires a context of at least {require.min_context} (it has {backend.context_length})"
    return None
