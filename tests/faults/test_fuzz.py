"""Schemathesis against the gateway in front of a ready twin fleet: no generated request may make the
gateway itself answer 5xx. A 5xx passed through from an engine carries `x-gateway-error-source: upstream`
and is not the gateway's. Requests are generated from a narrow description of the routes (fuzz_schema.py),
not the full one the gateway serves, so each stays cheap for the twin (at most 16 output tokens)."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import Counter
from collections.abc import Iterator

import pytest
import schemathesis
from fault_rig import MODEL, TIME_SCALE, fleet_spec, gateway_settings, serve_gateway
from fuzz_schema import fuzz_schema
from hypothesis import HealthCheck, given, settings

from gateway.sim.runner import TwinFleet

# Per operation and mode (valid bodies, then bodies that break the schema: wrong types, missing fields).
# The GET operations exhaust early: about 250 requests in all.
EXAMPLES_PER_OPERATION = 40


class _Background:
    """Twin fleet + gateway on their own event loop in a thread, so a synchronous test can call them."""

    def __init__(self) -> None:
        self.url = ""
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),))

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with TwinFleet(fleet_spec("a", "b"), time_scale=4 * TIME_SCALE, ephemeral_ports=True) as fleet:
            await fleet.wait_ready(10)
            urls = {name: fleet.url(name) for name in fleet.names}
            async with serve_gateway(gateway_settings(urls, timeouts={"first_byte_s": 5.0})) as (
                url,
                gateway,
                _,
            ):
                while not all(gateway.registry.backends[n].status == "ready" for n in urls):
                    await asyncio.sleep(0.02)
                self.url = url
                self._ready.set()
                await self._stop.wait()

    def __enter__(self) -> _Background:
        self._thread.start()
        if not self._ready.wait(20):
            raise TimeoutError("the gateway did not become ready")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(20)
        self._loop.close()


@pytest.fixture(scope="module")
def gateway_url() -> Iterator[str]:
    with _Background() as background:
        yield background.url


def test_generated_requests_never_make_the_gateway_answer_5xx(gateway_url: str) -> None:
    schema = schemathesis.openapi.from_dict(fuzz_schema(models=[MODEL]))
    seen: Counter[int] = Counter()
    own_5xx: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation, mode in itertools.product(operations, list(schemathesis.GenerationMode)):
        if mode is schemathesis.GenerationMode.NEGATIVE and operation.method.upper() != "POST":
            continue  # nothing to break in a GET without parameters

        @given(case=operation.as_strategy(mode))
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case: schemathesis.Case) -> None:
            response = case.call(base_url=gateway_url, timeout=10)
            seen[response.status_code] += 1
            source = response.headers.get("x-gateway-error-source", [""])
            source = source[0] if isinstance(source, list) else source
            if response.status_code >= 500 and source != "upstream":
                own_5xx.append(f"{case.method} {case.path} -> {response.status_code}: {response.text[:200]}")

        run()
    print(f"schemathesis: {sum(seen.values())} requests, statuses {dict(sorted(seen.items()))}")
    assert sum(seen.values()) >= 100
    assert own_5xx == []
