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
    args = _parse(build_parser(), argv)
    try:
        result: int = args.handler(args)
    except CommandError as exc:
        return _fail(f"{PROG}: error: {exc}", exc.status)
    except OSError as exc:
        if exc.filename is None:
            raise  # not a file the user named: a bug or an environment problem, keep the traceback
        return _fail(f"{PROG}: error: {exc.filename}: {exc.strerror}", 2)
    except Exception as exc:
        if not _is_file_error(exc):
            raise
        return _fail(str(exc), 2)  # already one `file:line: location: message` line per problem
    return result


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """parse_args, except that a command whose parser sets `passthrough` (bench) gets the arguments after
    its name as `passthrough_args`, for a parser it builds only when it runs."""
    args, rest = parser.parse_known_args(argv)
    if getattr(args, "passthrough", False):
        args.passthrough_args = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return args


def _is_file_error(exc: Exception) -> bool:
    """An invalid config, policy or fleet file. Their modules are imported only once a command failed:
    the policy's schema alone costs the command line a third of a second."""
    from gateway.policy.load import PolicyError
    from gateway.settings import SettingsError
    from gateway.sim.fleet import FleetError

    return isinstance(exc, (SettingsError, PolicyError, FleetError))


def _fail(text: str, status: int) -> int:
    print(text, file=sys.stderr)
    return status
