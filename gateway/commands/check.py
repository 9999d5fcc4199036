"""`spark-gateway check [--config FILE] [FILE...]`: validate policy files, or a gateway config with its
policy, without starting anything.

Prints one summary line per valid file (exit 0) or one `file:line: location: message` line per problem
(exit 1), the same text a running gateway logs when it refuses an edit. `--config` also checks that every
backend or tag the policy names exists in the config; warnings (`file:line: warning: ...`) do not fail.
`--probe` also reaches each of the config's backends once and says what it met: a backend nothing
listens at (a wrong URL, an engine not running) fails the check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gateway.commands import CommandError

USAGE_ERROR = 2


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "check", help="validate policy files, or a gateway config and its policy"
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="policy YAML files")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a gateway config: its fields, its policy, and the policy's backend names against it",
    )
    parser.add_argument(
        "--probe",
        action="store_true",
        help="with --config: reach each backend once at its readiness path and say what answers",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if not args.files and args.config is None:
        raise CommandError("check: give policy FILEs, or --config FILE", USAGE_ERROR)
    if args.probe and args.config is None:
        raise CommandError("check: --probe needs --config FILE", USAGE_ERROR)
    status = 0 if args.config is None else _config(args.config)
    if args.probe and status == 0:
        status = _probe(args.config)
    for path in args.files:
        status = max(status, _policy(path))
    return status


def _config(path: Path) -> int:
    from gateway.config_check import check_config  # imported here: `--help` stays fast

    report = check_config(path)
    for line in (*report.errors, *report.warnings):
        print(line, file=sys.stderr)
    if not report.ok:
        return 1
    print(report.summary)
    return 0


def _probe(path: Path) -> int:
    from gateway.config_check import probe_backends

    status = 0
    for answered, line in probe_backends(path):
        print(line, file=sys.stdout if answered else sys.stderr)
        status = status if answered else 1
    return status


def _policy(path: str) -> int:
    from gateway.policy.load import PolicyError, load_policy

    try:
        loaded = load_policy(path)
    except PolicyError as exc:
        print("\n".join(exc.lines()), file=sys.stderr)
        return 1
    print(f"{path}: ok: {loaded.summary()}")
    return 0
