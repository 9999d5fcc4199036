"""`spark-gateway sim --fleet FILE [--time-scale X]`: serve a twin fleet on the ports its file names."""

from __future__ import annotations

import argparse
import logging
from typing import Any


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sim", help="run a fleet of simulated engines (the engine twin) until Ctrl-C"
    )
    parser.add_argument("--fleet", required=True, help="fleet file, e.g. deploy/fleets/spark-duo-35b.yaml")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=20.0,
        help="simulated seconds per real second (default 20; 1 = real-time engines)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address the engines listen on")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `spark-gateway --help` imports every command's module.
    from gateway.sim.fleet import load_fleet
    from gateway.sim.runner import run_fleet_forever

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    spec = load_fleet(args.fleet)
    logging.getLogger(__name__).info(
        "fleet %s: %d engines, time scale %.1fx", spec.name, len(spec.engines), args.time_scale
    )
    run_fleet_forever(spec, time_scale=args.time_scale, host=args.host)
    return 0
