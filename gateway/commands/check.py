"""`spark-gateway check FILE...`: validate policy files without starting anything.

Prints one summary line per valid file (exit 0) or one `file:line: location: message` line per problem
(exit 1), the same text a running gateway logs when it refuses an edit.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gateway.policy.load import PolicyError, load_policy


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("check", help="validate policy files")
    parser.add_argument("files", nargs="+", metavar="FILE", help="policy YAML files")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        try:
            loaded = load_policy(path)
        except PolicyError as exc:
            print("\n".join(exc.lines()), file=sys.stderr)
            status = 1
        else:
            print(f"{path}: ok: {loaded.summary()}")
    return status
