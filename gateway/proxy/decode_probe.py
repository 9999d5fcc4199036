"""Decode probes: a short completion sent to one engine to measure how fast it decodes now, where sending
it a client's request to find out would cost more than it tells (docs/measurement.md, section 6).

On a shared device, measuring an engine with a client's request keeps that engine busy for the request's
whole life, and every request of the busy engine beside it runs slower all that time (on a Spark a second
busy engine nearly doubles the first's step). Decode speed at a load is the engine's, whatever the
prompt, so for a `tokens_per_second` profile a few dozen tokens tell what a few hundred would: the
adaptive scorer plans a probe instead (records.ExplorationPlan.probe), the client's request goes where it
is predicted best, and the probe's sample joins the backend's windows under PROBE_PROFILE, where its
all-profile fit (what a `tokens_per_second` cell short of samples borrows) reads it. For a ttft or e2e
profile, whose prefill a probe does not measure, probes tell whether the engine decodes slower than the
winner, which puts a whole request of it off (routing/explore/probes.probe_instead).

A probe is a streamed completion of PROBE_TOKENS tokens with `ignore_eos` (vLLM, SGLang and llama.cpp
accept it), so it decodes them all. Its stream is read by the relay's meter (proxy/stream.SseMeter): its
TTFT is the first frame with content, its token count the usage (asked with include_usage) or else its
content frames. It goes to /v1/completions, or to /v1/chat/completions for a backend configured to serve
chat and not completions. A few probes of one backend may run at once (what one estimate lacks of its
min_samples, sent together, each timed at the load the others make), never more than MAX_IN_FLIGHT. A
probe that fails records nothing and blames nobody: health is the prober's and the breakers' business.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gateway.clock import monotonic
from gateway.proxy.stream import SseMeter, usage_counts
from gateway.proxy.upstream import UpstreamError, UpstreamTransport
from gateway.records import Sample

log = logging.getLogger(__name__)

PROBE_PROFILE = "(decode probe)"
# Long enough for a TPOT over a few engine steps (speculative engines emit several tokens a step), short
# enough to keep its engine busy a small share of what a client's request would.
PROBE_TOKENS = 32
PROBE_PROMPT = "Count from one to one hundred in words, separated by commas:"
# Probes of one backend in flight at once: one estimate's min_samples (policies use 5 to 10), and a bound
# against anything planning more.
MAX_IN_FLIGHT = 8

Record = Callable[[str, str, Sample], None]  # (backend, profile, sample): LiveRecorder.record


@dataclass(frozen=True, slots=True)
class ProbeTarget:
    url: str  # the backend's base URL, without /v1
    model: str  # the model name it serves
    headers: Mapping[str, str] = field(default_factory=dict)
    chat: bool = False  # probe through /v1/chat/completions (a backend that serves no completions)


class DecodeProbes:
    """Sends decode probes on demand (`send`) and records each one's sample; `stop` cancels those in
    flight. `inflight` and `shared_seconds` (a backend's seconds so far with another backend of its device
    busy: accounting.DeviceTime) read the gateway's own books, as dispatch records a request's."""

    def __init__(
        self,
        transport: UpstreamTransport,
        targets: Mapping[str, ProbeTarget],
        record: Record,
        *,
        inflight: Callable[[str], int],
        shared_seconds: Callable[[str], float],
        clock: Callable[[], float] = monotonic,
    ) -> None:
        self.transport = transport
        self.targets = dict(targets)
        self.record = record
        self.inflight = inflight
        self.shared_seconds = shared_seconds
        self.clock = clock
        self._running: dict[str, set[asyncio.Task[None]]] = {}
        self.sent = 0  # probes started

    def send(self, backend: str) -> None:
        """Probe `backend` now, unless it cannot be probed or MAX_IN_FLIGHT probes of it are running."""
        running = self._running.setdefault(backend, set())
        if backend not in self.targets or len(running) >= MAX_IN_FLIGHT:
            return
        task = asyncio.get_running_loop().create_task(self._probe(backend), name=f"decode-probe-{backend}")
        running.add(task)
        task.add_done_callback(running.discard)
        self.sent += 1

    async def start(self) -> None:
        """Nothing runs until a probe is sent (a service of the app, for `stop`)."""

    async def stop(self) -> None:
        tasks = [task for running in self._running.values() for task in running]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _probe(self, backend: str) -> None:
        target = self.targets[backend]
        # As dispatch counts a request, itself included, and the probes sent with it
        concurrency = self.inflight(backend) + len(self._running.get(backend, ()))
        shared_at_start = self.shared_seconds(backend)
        started = self.clock()
        meter = SseMeter(strip_usage=False, clock=self.clock)
        try:
            url = f"{target.url}/v1/chat/completions" if target.chat else f"{target.url}/v1/completions"
            response = await self.transport.send(url, target.headers, _body(target))
            try:
                if response.status != 200:
                    log.debug("decode probe of %s: HTTP %s", backend, response.status)
                    return
                async for chunk in response.iter_chunks(lambda: meter.first_token_at is not None):
                    meter.feed(chunk)
                meter.flush()
            finally:
                response.close()
        except (UpstreamError, OSError) as exc:
            log.debug("decode probe of %s failed: %s", backend, exc)
            return
        e2e = self.clock() - started
        shared = (self.shared_seconds(backend) - shared_at_start) / e2e if e2e > 0 else 0.0
        sample = _sample(meter, e2e, started, concurrency, min(1.0, shared))
        if sample is not None:
            self.record(backend, PROBE_PROFILE, sample)


def _body(target: ProbeTarget) -> bytes:
    prompt: dict[str, object] = (
        {"messages": [{"role": "user", "content": PROBE_PROMPT}]} if target.chat else {"prompt": PROBE_PROMPT}
    )
    return json.dumps(
        {
            "model": target.model,
            **prompt,
            "max_tokens": PROBE_TOKENS,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        }
    ).encode()


def _sample(
    meter: SseMeter, e2e: float, started: float, concurrency: int, device_share: float
) -> Sample | None:
    """The probe as a Sample, or None when it decoded too little to time (no content, or one token)."""
    prompt, completion = usage_counts(meter.usage) or (None, None)
    tokens = completion if completion is not None else meter.content_frames
    if meter.first_token_at is None or tokens < 2:
        return None
    return Sample(
        e2e=e2e,
        ttft=meter.first_token_at - started,
        output_tokens=tokens,
        prompt_tokens=prompt or 0,
        concurrency=concurrency,
        device_share=device_share,
    )
