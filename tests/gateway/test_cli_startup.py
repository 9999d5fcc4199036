"""The command line imports what the chosen command needs, no more: `--help` and `explain` start without
the gateway, the twin, aiohttp or pydantic (a new user's first commands; each cost seconds to import)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("aiohttp", "pydantic", "uvicorn", "gateway.app", "gateway.sim.engine", "gateway.policy.schema")

PROBE = """
import sys
from gateway.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("LOADED", *sorted(m for m in sys.modules if m.split(".")[0] in ("aiohttp", "pydantic", "uvicorn")
      or m.startswith("gateway.")))
"""


def _loaded(*argv: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        input='{"model": "m"}',
    )
    line = next(line for line in done.stdout.splitlines() if line.startswith("LOADED"))
    return set(line.split()[1:])


def _heavy(loaded: set[str]) -> set[str]:
    return {name for name in HEAVY if name in loaded}


def test_help_imports_no_command_body() -> None:
    assert _heavy(_loaded("--help")) == set()


def test_explain_imports_no_gateway_runtime() -> None:
    # Nothing listens on port 9: the command fails at once, after importing all it would use.
    assert _heavy(_loaded("explain", "--url", "http://127.0.0.1:9", "--timeout", "1", "-")) == set()


def test_bench_kinds_are_imported_only_for_bench() -> None:
    assert "gateway.bench.routing" not in _loaded("--help")
    assert "gateway.bench.routing" in _loaded("bench", "--help")
