"""Subcommands of `spark-gateway`, one module each (see gateway/cli.py)."""

from __future__ import annotations


class CommandError(Exception):
    """An expected failure (unreachable gateway, unusable input) that `spark-gateway` reports as one line
    on stderr, without a traceback, and exits with `status`."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status
