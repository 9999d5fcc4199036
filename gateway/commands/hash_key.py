"""`spark-gateway hash-key`: print the SHA-256 form of an API key read from stdin, for the `auth:` section
of the configuration (client_key_hashes, admin_key_hash). The key is read from stdin, never from the
command line, so it stays out of shell history and process listings."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "hash-key", help="print the hash of an API key read from stdin (for the auth settings)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from gateway.api.auth import hash_key  # imported here: `--help` stays fast

    key = sys.stdin.readline().strip()
    if not key:
        print('hash-key: no key on stdin, e.g. printf %s "$KEY" | spark-gateway hash-key', file=sys.stderr)
        return 2
    print(hash_key(key))
    return 0
