"""`spark-gateway schema`: print the JSON Schema of the policy file (for editors and CI validation)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("schema", help="print the policy JSON Schema")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from gateway.policy.schema import policy_json_schema  # imported here: `--help` stays fast

    print(json.dumps(policy_json_schema(), indent=2, sort_keys=True))
    return 0
