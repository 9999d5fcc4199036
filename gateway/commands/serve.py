"""`spark-gateway serve [--config FILE | --fleet FLEET] [--host H] [--port P]`.

With `--config`, serve the backends of a gateway config file (see deploy/gateway.example.yaml). With
`--fleet`, start that twin fleet in this process and serve it: one pool per served model name, every
engine a backend with its flavor, and the fleet's policy file if it has one. With neither, serve the
twin fleet deploy/fleets/spark-duo-35b.yaml on 127.0.0.1:8080, its engines already loaded (a fleet given
with `--fleet` warms up as its file says). It logs `ready` once every model has a ready backend, and a
countdown of the warm-ups until then (gateway/readiness.py). A twin keeps no state: its measurements
are neither loaded nor saved, so it never reads or writes a real gateway's state directory.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

# The gateway, the twin and uvicorn are imported where they are used, not here: `spark-gateway --help`
# imports every command's module, and these cost it seconds.
if TYPE_CHECKING:
    from gateway.settings import Settings
    from gateway.sim.fleet import FleetSpec

log = logging.getLogger("gateway.serve")

REPO = Path(__file__).resolve().parents[2]
DEFAULT_FLEET = Path("deploy/fleets/spark-duo-35b.yaml")
# The twin runs faster than the wall clock so its 5-minute simulated warm-up takes 15 s.
DEFAULT_TIME_SCALE = 20.0


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("serve", help="run the gateway")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--config", type=Path, help="gateway config YAML (env SPARK_GATEWAY_* overrides it)")
    source.add_argument("--fleet", type=Path, help="start this twin fleet in-process and serve it")
    parser.add_argument("--host", help="listen address (default: the config's, or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default: the config's, or 8080)")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=DEFAULT_TIME_SCALE,
        help=f"twin fleets only: simulated seconds per real second (default {DEFAULT_TIME_SCALE:g})",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import uvloop

    from gateway.settings import load_settings
    from gateway.sim.fleet import load_fleet

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    listen = {key: value for key, value in (("host", args.host), ("port", args.port)) if value is not None}
    # An unreadable or invalid config, policy or fleet file is reported by gateway/cli.py: one line each.
    if args.config is not None:
        settings = load_settings(args.config).model_copy(update=listen)
        uvloop.run(_serve(settings, args.log_level))
        return 0
    if args.fleet is not None:
        spec = load_fleet(args.fleet)  # its engines warm up as the file says
    else:
        fleet_path = _resolve(DEFAULT_FLEET)
        log.info("no --config or --fleet: serving the twin fleet %s, its engines already loaded", fleet_path)
        spec = loaded(load_fleet(fleet_path))
    uvloop.run(_serve_fleet(spec, listen, args.time_scale, args.log_level))
    return 0


def loaded(spec: FleetSpec) -> FleetSpec:
    """The fleet with its engines' simulated warm-up skipped: the built-in fleet is there to show routing
    at once, and a first request should not wait behind a load nobody asked to see."""
    engines = [engine.model_copy(update={"warmup_s": 0.0}) for engine in spec.engines]
    return spec.model_copy(update={"engines": engines})


async def _serve(settings: Settings, log_level: str) -> None:
    import asyncio

    import uvicorn

    from gateway.api.connections import ConnectionCollector
    from gateway.app import build_app, build_gateway
    from gateway.readiness import announce_ready
    from gateway.serving import DrainingServer, connection_cap, server_options

    gateway = build_gateway(settings)
    app = build_app(gateway)
    cap = connection_cap(settings.limits)  # raises the fd soft limit first
    gateway.metrics.registry.register(ConnectionCollector(cap))
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        lifespan="on",
        log_level=log_level,
        **server_options(settings.limits, cap),  # head limits, JSON protocol errors, no access log
    )
    server = DrainingServer(config, gateway.drain, settings.shutdown.drain_timeout_s)
    # "ready" only once a request is served at once (every model has a ready backend), a countdown before.
    announcer = asyncio.create_task(
        announce_ready(gateway, server, f"http://{settings.host}:{settings.port}")
    )
    try:
        await server.serve()
    finally:
        announcer.cancel()


async def _serve_fleet(spec: FleetSpec, listen: dict[str, Any], time_scale: float, log_level: str) -> None:
    from gateway.sim.runner import TwinFleet

    # Ephemeral engine ports: the gateway is the fleet's front door, and fixed ports may be taken.
    async with TwinFleet(spec, time_scale=time_scale, ephemeral_ports=True) as fleet:
        for name in fleet.names:
            log.info("twin engine %s (%s) at %s", name, fleet.engine(name).spec.flavor, fleet.url(name))
        settings = settings_for_fleet(spec, {name: fleet.url(name) for name in fleet.names}, **listen)
        log.info(
            "serving fleet %s on http://%s:%d (time scale %g, router: %s)",
            spec.name,
            settings.host,
            settings.port,
            time_scale,
            f"policy {settings.policy}" if settings.policy else "least busy",
        )
        await _serve(settings, log_level)


def settings_for_fleet(spec: FleetSpec, urls: dict[str, str], **listen: Any) -> Settings:
    """One pool per served model name; every engine a backend with its flavor and declared vision."""
    from gateway.settings import load_settings

    backends = [
        {
            "name": engine.name,
            "url": urls[engine.name],
            "flavor": engine.flavor,
            "device": engine.device,  # engines on one device share its bandwidth
            # vLLM's /v1/models does not say whether a checkpoint can see; the fleet file does.
            "modalities": ["text", "image"] if engine.vision else ["text"],
        }
        for engine in spec.engines
    ]
    served = list(dict.fromkeys(engine.served_model_name for engine in spec.engines))
    pools = [
        {"model": model, "backends": [e.name for e in spec.engines if e.served_model_name == model]}
        for model in served
    ]
    policy = _resolve(Path(spec.policy)) if spec.policy else None
    settings = load_settings(None, backends=backends, pools=pools, policy=policy, **listen)
    # No state, even when SPARK_GATEWAY_STATE_DIR names a real gateway's: a twin's timings are not a
    # real engine's, and the real gateway's state must not change because a twin ran.
    return settings.model_copy(update={"state_dir": None})


def _resolve(path: Path) -> Path:
    """A repo-relative path: from the working directory if it is there, else from the source tree (an
    editable install), else from the data files a plain install ships (pyproject's data-files)."""
    if path.is_absolute() or path.exists():
        return path
    for root in (REPO, Path(sys.prefix) / "share" / "spark-gateway"):
        if (root / path).exists():
            return root / path
    return path  # not found anywhere: the error names the path as given
