"""A gateway config and its policy, checked together.

`spark-gateway check --config FILE` runs `check_config`; a starting gateway enforces the same cross-check
through its policy watcher, which app.py hands `known_backends(settings)`: a policy naming a backend the
config does not define stops the start, and a hot reload of one is refused.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from gateway.backends.flavors import FLAVORS
from gateway.backends.reachability import host_port, nothing_listens
from gateway.policy.crosscheck import KnownBackend
from gateway.policy.load import PolicyError, load_policy
from gateway.settings import Settings, SettingsError, load_config


def known_backends(settings: Settings) -> tuple[KnownBackend, ...]:
    """The config's backends as the policy cross-check sees them (plain data)."""
    return tuple(
        KnownBackend(
            name=b.name,
            tags=b.tags,
            pools=tuple(p.model for p in settings.pools if b.name in p.backends),
            modalities=b.modalities,
            context_length=b.context_length,
        )
        for b in settings.backends
    )


@dataclass(frozen=True, slots=True)
class ConfigReport:
    errors: tuple[str, ...] = ()  # `file:line: location: message`, one per problem
    warnings: tuple[str, ...] = ()  # `file:line: warning: ...`
    summary: str = ""  # one line, when there is no error

    @property
    def ok(self) -> bool:
        return not self.errors


def check_config(path: Path) -> ConfigReport:
    """The config (environment included, as `serve` would read it), its policy, and the policy's names
    against the config's backends."""
    try:
        loaded = load_config(path)
    except SettingsError as exc:
        return ConfigReport(errors=tuple(exc.lines))
    settings, warnings = loaded.settings, loaded.warnings
    routing = "no policy (least busy backend)"
    if settings.policy is not None:
        try:
            policy = load_policy(settings.policy, known_backends(settings))
        except PolicyError as exc:
            return ConfigReport(errors=tuple(exc.lines()), warnings=warnings)
        warnings += tuple(policy.warning_lines())
        profiles = _count(len(policy.policy.profiles), "profile")
        routing = f"policy {policy.source} ({profiles}, routing {policy.policy.routing})"
    state = settings.state_dir if settings.state_dir is not None else "none kept"
    backends, pools = _count(len(settings.backends), "backend"), _count(len(settings.pools), "pool")
    summary = f"{path}: ok: {backends}, {pools}, {routing}, state {state}"
    return ConfigReport(warnings=warnings, summary=summary)


def probe_backends(path: Path, timeout_s: float = 3.0) -> list[tuple[bool, str]]:
    """Each backend of the config at `path` reached once, at its flavor's readiness path, all at once:
    (answered, one line naming it and what was met). Nothing listening is told from an engine that
    answers, loading or not."""
    settings = load_config(path).settings
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(settings.backends)))) as pool:
        found = pool.map(
            lambda b: _probe(b.name, b.url, FLAVORS[b.flavor].health_path, timeout_s), settings.backends
        )
        return list(found)


def _probe(name: str, url: str, health_path: str, timeout_s: float) -> tuple[bool, str]:
    where = host_port(url)
    try:
        # The URL is the operator's own config, probed on request: not a client's input.
        with urllib.request.urlopen(url + health_path, timeout=timeout_s) as response:  # noqa: S310
            return True, f"backend {name} at {where}: answers ({health_path} -> {response.status})"
    except urllib.error.HTTPError as exc:  # an answer all the same: something listens
        return True, f"backend {name} at {where}: answers ({health_path} -> {exc.code})"
    except (OSError, ValueError) as exc:
        why = nothing_listens(exc)
        if why is not None:
            return False, f"backend {name}: nothing listens at {where} ({why}); check its url"
        return False, f"backend {name} at {where}: no answer within {timeout_s:g} s ({type(exc).__name__})"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
