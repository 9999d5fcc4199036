"""Start a whole fleet of simulated engines inside the current event loop.

    async with TwinFleet(load_fleet("deploy/fleets/spark-duo-35b.yaml"), time_scale=50.0,
                         ephemeral_ports=True) as fleet:
        await fleet.wait_ready()
        url = fleet.url("fp8-mtp")

All engines share one simulated clock; engines naming the same device share one Device, so two busy
engines on one Spark slow each other down.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from types import TracebackType

from gateway.sim.clock import SimClock
from gateway.sim.engine import SimEngine
from gateway.sim.fleet import FleetSpec
from gateway.sim.perf import Device

log = logging.getLogger(__name__)


class TwinFleet:
    def __init__(
        self,
        spec: FleetSpec,
        time_scale: float = 20.0,
        host: str = "127.0.0.1",
        ephemeral_ports: bool = False,
    ) -> None:
        self.spec = spec
        self.clock = SimClock(time_scale)
        self.devices = {name: Device(device_spec) for name, device_spec in spec.devices.items()}
        self._engines: dict[str, SimEngine] = {}
        for engine_spec in spec.engines:
            if ephemeral_ports:
                engine_spec = engine_spec.model_copy(update={"port": 0})
            self._engines[engine_spec.name] = SimEngine(
                engine_spec, self.devices[engine_spec.device], self.clock, host=host
            )

    @property
    def names(self) -> list[str]:
        return list(self._engines)

    def engine(self, name: str) -> SimEngine:
        try:
            return self._engines[name]
        except KeyError:
            raise KeyError(f"no engine {name!r} in fleet {self.spec.name!r}; engines: {self.names}") from None

    def url(self, name: str) -> str:
        """Base URL of an engine (without /v1); known as soon as the fleet started, even while loading."""
        return self.engine(name).url

    async def start(self) -> None:
        started: list[SimEngine] = []
        try:
            for engine in self._engines.values():
                await engine.start()
                started.append(engine)
        except BaseException:
            await asyncio.gather(*(e.stop() for e in started), return_exceptions=True)
            raise

    async def stop(self) -> None:
        await asyncio.gather(*(e.stop() for e in self._engines.values()), return_exceptions=True)

    async def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Wait (real seconds) until every engine serves."""
        await asyncio.gather(*(e.wait_ready(timeout_s) for e in self._engines.values()))

    async def __aenter__(self) -> TwinFleet:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


def run_fleet_forever(spec: FleetSpec, time_scale: float = 1.0, host: str = "127.0.0.1") -> None:
    """Serve a fleet on its configured ports until SIGINT/SIGTERM (blocking; for the CLI)."""
    asyncio.run(_serve_until_signal(spec, time_scale, host))


def _each(actions: list[Callable[[], None]]) -> None:
    for action in actions:
        action()


async def _serve_until_signal(spec: FleetSpec, time_scale: float, host: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with TwinFleet(spec, time_scale=time_scale, host=host) as fleet:
        # A fault a test can set from outside, like SIGSTOP: SIGUSR1 wedges every engine (HTTP answers,
        # no token comes), SIGUSR2 lets them run again.
        engines = [fleet.engine(name) for name in fleet.names]
        loop.add_signal_handler(signal.SIGUSR1, _each, [e.wedge for e in engines])
        loop.add_signal_handler(signal.SIGUSR2, _each, [e.unwedge for e in engines])
        for name in fleet.names:
            engine = fleet.engine(name)
            log.info(
                "engine %s: %s %s serving %r at %s (warm-up %.0f s simulated)",
                name,
                engine.spec.flavor,
                engine.spec.model_path,
                engine.spec.served_model_name,
                engine.url,
                engine.spec.warmup_s,
            )
        await stop.wait()
        log.info("stopping fleet %s", spec.name)
