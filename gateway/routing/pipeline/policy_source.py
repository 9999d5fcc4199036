"""Where the policy router reads the policy in force: a watcher of the file (policy/watch.py) in a running
gateway, or one policy that never changes."""

from __future__ import annotations

from typing import Protocol

from gateway.policy.load import LoadedPolicy


class PolicySource(Protocol):
    """Where the router reads the policy in force (PolicyWatcher satisfies it)."""

    @property
    def current(self) -> LoadedPolicy: ...

    @property
    def last_error(self) -> str | None: ...


class FixedPolicy:
    """A PolicySource that never changes (tests, one-shot tools)."""

    def __init__(self, loaded: LoadedPolicy) -> None:
        self._loaded = loaded

    @property
    def current(self) -> LoadedPolicy:
        return self._loaded

    @property
    def last_error(self) -> str | None:
        return None
