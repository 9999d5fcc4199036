"""The `spark-gateway` command line.

Each subcommand lives in its own module under gateway/commands/ and exposes
`register(subparsers) -> None`, which adds its parser and sets `handler` (a callable taking the parsed
namespace and returning an exit code). Commands are discovered, so adding one touches no shared file.

Expected failures are reported here, once for every command, as lines on stderr without a traceback:
an invalid config, policy or fleet file (their own `file:line: ...` lines, exit 2), a file that cannot
be read (exit 2) and a command's CommandError (its one line and status). Anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from gateway import __version__, commands
from gateway.commands import CommandError
from gateway.policy.load import PolicyError
from gateway.settings import SettingsError
from gateway.sim.fleet import FleetError

PROG = "spark-gateway"


def build_parser() -> argparse.ArgumentParser:
    summary = __doc__.splitlines()[0] if __doc__ else None
    parser = argparse.ArgumentParser(prog=PROG, description=summary)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result: int = args.handler(args)
    except (SettingsError, PolicyError, FleetError) as exc:
        return _fail(str(exc), 2)  # already one `file:line: location: message` line per problem
    except CommandError as exc:
        return _fail(f"{PROG}: error: {exc}", exc.status)
    except OSError as exc:
        if exc.filename is None:
            raise  # not a file the user named: a bug or an environment problem, keep the traceback
        return _fail(f"{PROG}: error: {exc.filename}: {exc.strerror}", 2)
    return result


def _fail(text: str, status: int) -> int:
    print(text, file=sys.stderr)
    return status
