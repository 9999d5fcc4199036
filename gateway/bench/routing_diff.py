"""`spark-gateway bench routing-diff A.jsonl B.jsonl`: where two replays' routing decisions part.

The logs are those `bench routing --decisions DIR` writes (DIR/FLEET/STRATEGY.rROUND.jsonl): two
strategies on the same fleet and trace, or one strategy on two versions of the code. Decisions are lined
up by the request of the trace they were made for, not by their order (a faster router changes the
order), and each request routed differently is printed: its order in A, its place in the trace, its
class, and each side's profile and backend.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gateway.bench.routing_decisions import diverging, read_log, render_divergence
from gateway.commands import CommandError


def _handle(args: argparse.Namespace) -> int:
    logs = []
    for name in (args.a, args.b):
        try:
            logs.append(read_log(Path(name)))
        except OSError as exc:
            raise CommandError(f"cannot read decision log {name}: {exc.strerror or exc}", status=2) from exc
        except (ValueError, TypeError) as exc:
            raise CommandError(
                f"decision log {name}: not a `bench routing --decisions` log ({exc})", status=2
            ) from exc
    a, b = Path(args.a), Path(args.b)
    names = (a.stem, b.stem) if a.stem != b.stem else (str(a), str(b))  # one strategy on two versions
    print(render_divergence(*names, diverging(*logs), args.limit))
    return 0


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "routing-diff", help="where two `bench routing --decisions` logs route the same request differently"
    )
    parser.add_argument("a", help="decision log (JSON lines)")
    parser.add_argument("b", help="decision log to compare it with")
    parser.add_argument("--limit", type=int, default=40, help="requests listed at most (all are counted)")
    parser.set_defaults(handler=_handle)
