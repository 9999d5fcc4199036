"""Loading a policy file with errors that name the file and line, and the watcher that hot-reloads it.

The watcher polls the file's content hash instead of using inotify: it works the same on bind mounts,
network filesystems and editors that replace the file on save. Policy files are a few KB, so hashing one
every 0.5 s costs microseconds, and unlike an mtime + size check it cannot miss two same-size edits made
within one filesystem timestamp tick. A change is applied only once the file has been stable for one poll
(the same mtime, size and content hash on two polls in a row), and the bytes applied are the bytes
checked: a file written in place is never applied half-written, even when its first half is a valid
policy. A valid edit replaces the policy for new requests; an invalid edit, or one naming a backend the
gateway's config does not define, is logged with its line and the last good policy stays in force. The
polling loop is a `BackgroundTask` (gateway/tasks.py): whatever a poll raises is logged once per
distinct error, the policy in force stays, and polling goes on.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gateway.policy.crosscheck import CrossCheck, KnownBackend, cross_check
from gateway.policy.schema import Policy
from gateway.tasks import BackgroundTask
from gateway.yaml_lines import Loc, dotted, locate, unknown_field

ReloadCallback = Callable[[str, str | None], None]  # (result "ok" | "error", error text or None)


@dataclass(frozen=True, slots=True)
class Issue:
    """One problem in a policy file: where it is and what is wrong."""

    line: int | None  # 1-based; None when the problem has no place (e.g. an unreadable file)
    location: str  # dotted path inside the document, e.g. "profiles.2.when.prompt_tokens"
    message: str
    warning: bool = False  # worth a look, but the policy is used

    def render(self, source: str) -> str:
        where = f"{source}:{self.line}" if self.line is not None else source
        what = f"{self.location}: {self.message}" if self.location else self.message
        return f"{where}: warning: {what}" if self.warning else f"{where}: {what}"


class PolicyError(Exception):
    """A policy file that cannot be used; `lines()` renders one `file:line: location: message` each."""

    def __init__(self, source: str, issues: list[Issue]) -> None:
        self.source = source
        self.issues = issues
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        return [issue.render(self.source) for issue in self.issues]


@dataclass(frozen=True, slots=True)
class LoadedPolicy:
    policy: Policy
    source: str
    sha256: str
    warnings: tuple[Issue, ...] = ()  # from the cross-check against the config's backends

    def warning_lines(self) -> list[str]:
        return [issue.render(self.source) for issue in self.warnings]

    def summary(self) -> str:
        names = ", ".join(p.name for p in self.policy.profiles)
        return (
            f"version {self.policy.version}, routing {self.policy.routing}, "
            f"{len(self.policy.profiles)} profiles ({names}), sha256 {self.sha256[:12]}"
        )


def parse_policy(
    text: str, source: str = "<policy>", known: Sequence[KnownBackend] | None = None
) -> LoadedPolicy:
    """Validate policy text; raises PolicyError with line-numbered issues. With `known` (the config's
    backends), the names the profiles use are checked against them too (gateway/policy/crosscheck.py)."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise PolicyError(source, [Issue(line, "", f"invalid YAML: {exc.problem or exc}")]) from exc
    if not isinstance(data, dict):
        raise PolicyError(source, [Issue(1, "", "a policy is a mapping with `version: 1` and `profiles:`")])
    duplicates = _duplicate_keys(root)
    if duplicates:
        raise PolicyError(source, duplicates)
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        issues = list(dict.fromkeys(_issue(root, err) for err in exc.errors()))  # dedupe
        # In the file's line order (pydantic reports them in field order), as the config's are.
        raise PolicyError(source, sorted(issues, key=lambda issue: issue.line or 0)) from exc
    checked = cross_check(policy, known) if known is not None else CrossCheck((), ())
    if checked.errors:
        raise PolicyError(source, [_found(root, loc, message) for loc, message in checked.errors])
    warnings = tuple(_found(root, loc, message, warning=True) for loc, message in checked.warnings)
    return LoadedPolicy(policy=policy, source=source, sha256=digest, warnings=warnings)


def load_policy(path: str | os.PathLike[str], known: Sequence[KnownBackend] | None = None) -> LoadedPolicy:
    """Read and validate a policy file (against `known` backends when given); raises PolicyError (an
    unreadable file is one too)."""
    try:
        # Bytes, then decode: text mode would translate CRLF and the hash would not match the file's.
        data = Path(path).read_bytes()
    except OSError as exc:
        raise PolicyError(str(path), [Issue(None, "", f"cannot read: {exc}")]) from exc
    return _policy_from_bytes(data, path, known)


def _policy_from_bytes(
    data: bytes, path: str | os.PathLike[str], known: Sequence[KnownBackend] | None
) -> LoadedPolicy:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(str(path), [Issue(None, "", f"cannot read: {exc}")]) from exc
    return parse_policy(text, str(path), known)


def _issue(root: yaml.Node | None, err: Any) -> Issue:
    line, kept = locate(root, tuple(err["loc"]))
    message = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        message = unknown_field("`spark-gateway schema`")
    return Issue(line, dotted(kept), message)


def _found(root: yaml.Node | None, loc: Loc, message: str, *, warning: bool = False) -> Issue:
    line, kept = locate(root, loc)
    return Issue(line, dotted(kept), message, warning)


def _duplicate_keys(node: yaml.Node | None, path: str = "") -> list[Issue]:
    """PyYAML keeps the last of two equal keys without a word; a policy edit must not lose one silently."""
    issues: list[Issue] = []
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            name = str(key.value)
            where = f"{path}.{name}" if path else name
            if name in seen:
                issues.append(Issue(key.start_mark.line + 1, where, "duplicate key"))
            seen.add(name)
            issues.extend(_duplicate_keys(value, where))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            issues.extend(_duplicate_keys(item, f"{path}.{index}" if path else str(index)))
    return issues


@dataclass(frozen=True, slots=True)
class ReloadResult:
    ok: bool
    changed: bool  # False when the file's content equals the policy in force
    loaded: LoadedPolicy  # the policy in force after this reload
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Seen:
    """The policy file as one poll saw it."""

    mtime_ns: int
    size: int
    sha256: str
    data: bytes = field(compare=False, repr=False)


@dataclass
class _FileState:
    failed_sha256: str | None = None  # content that last failed, so it is reported once
    counts: dict[str, int] = field(default_factory=lambda: {"ok": 0, "error": 0})
    pending: _Seen | None = None  # a change seen by the last poll, applied if the next one sees it again


class PolicyWatcher:
    """Holds the policy in force for one file and reloads it when the file changes.

    `current` is what routing reads on every request (one attribute read, no lock: the reference is
    replaced whole). `on_reload(result, error)` is called once per reload attempt so the owner can count
    them (e.g. gateway_policy_reloads_total{result}). `known`, the config's backends, makes every load
    cross-check the names the profiles use: an edit naming a backend the gateway does not have is
    refused like any invalid one.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        interval_s: float = 0.5,
        on_reload: ReloadCallback | None = None,
        logger: logging.Logger | None = None,
        known: Sequence[KnownBackend] | None = None,
    ) -> None:
        self.path = Path(path)
        self.interval_s = interval_s
        self._on_reload = on_reload
        self._log = logger or logging.getLogger("gateway.policy")
        self._state = _FileState()
        self._known = tuple(known) if known is not None else None
        # A gateway must not start on a bad policy: PolicyError leaves the constructor.
        self.current: LoadedPolicy = load_policy(self.path, self._known)
        self._warn(self.current)
        self.last_error: str | None = None
        # The last reload attempt: (wall-clock epoch seconds, "ok" | "error"); None before the first.
        self.last_reload: tuple[float, str] | None = None
        self._task = BackgroundTask(
            self._round,
            name=f"policy-watcher:{self.path.name}",
            on_error=lambda exc: self.interval_s,  # the policy in force stays; the next poll retries
            logger=self._log,
            delay_s=interval_s,
        )

    @property
    def reload_counts(self) -> dict[str, int]:
        return dict(self._state.counts)

    def reload(self) -> ReloadResult:
        """Read the file now and apply it if valid (POST /gateway/policy/reload: the operator says it is
        complete, so there is no waiting for it to be stable)."""
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            return self._rejected(PolicyError(str(self.path), [Issue(None, "", f"cannot read: {exc}")]), None)
        return self._apply(data)

    def _apply(self, data: bytes) -> ReloadResult:
        """Apply exactly these bytes of the file if they are a valid policy."""
        try:
            loaded = _policy_from_bytes(data, self.path, self._known)
        except PolicyError as exc:
            return self._rejected(exc, hashlib.sha256(data).hexdigest())
        changed = loaded.sha256 != self.current.sha256
        self.current, self.last_error, self._state.failed_sha256 = loaded, None, None
        self._count("ok", None)
        if changed:
            self._log.info("policy %s reloaded: %s", self.path, loaded.summary())
            self._warn(loaded)
        return ReloadResult(ok=True, changed=changed, loaded=loaded)

    def poll(self) -> ReloadResult | None:
        """One polling step: a content that differs from the policy in force is applied once the file has
        been stable for one poll: the same mtime, size and content hash as the previous poll saw. A file
        still being written (in place, not replaced atomically) changes between two polls, so a prefix
        of it, even one that is a valid policy, is never applied."""
        seen = self._look()
        if seen is None or seen.sha256 in (self.current.sha256, self._state.failed_sha256):
            self._state.pending = None
            return None  # missing, unchanged, or the same broken content again (reported once)
        if seen != self._state.pending:
            self._state.pending = seen  # changed since the last poll: wait one more poll
            return None
        self._state.pending = None
        return self._apply(seen.data)

    async def start(self) -> None:
        self._task.start()

    async def stop(self) -> None:
        await self._task.stop()

    async def _round(self) -> float:
        self.poll()
        return self.interval_s

    def _rejected(self, exc: PolicyError, digest: str | None) -> ReloadResult:
        text = "\n".join(exc.lines())
        self.last_error = text
        self._state.failed_sha256 = digest
        self._count("error", text)
        self._log.error(
            "policy %s rejected, keeping the last good one (sha256 %s): %s",
            self.path,
            self.current.sha256[:12],
            "; ".join(exc.lines()),
        )
        return ReloadResult(ok=False, changed=False, loaded=self.current, errors=tuple(exc.lines()))

    def _warn(self, loaded: LoadedPolicy) -> None:
        for line in loaded.warning_lines():
            self._log.warning("policy %s", line)

    def _count(self, result: str, error: str | None) -> None:
        self._state.counts[result] += 1
        self.last_reload = (time.time(), result)
        if self._on_reload is not None:
            self._on_reload(result, error)

    def _look(self) -> _Seen | None:
        """The file now (None when it cannot be read: a deleted file is ignored until it reappears)."""
        try:
            with self.path.open("rb") as file:
                stat = os.fstat(file.fileno())
                data = file.read()
        except OSError:
            return None
        return _Seen(stat.st_mtime_ns, stat.st_size, hashlib.sha256(data).hexdigest(), data)
