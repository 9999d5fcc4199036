"""One finished request as the live windows keep it: the unit of every measurement adaptive routing uses."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Sample:
    """One finished request as the gateway saw it. Times are seconds."""

    e2e: float  # dispatch to last byte
    ttft: float | None  # dispatch to first token; None when no token arrived
    output_tokens: int
    prompt_tokens: int
    concurrency: int  # the backend's in-flight count at dispatch, this request included
    error: bool = False
    mean_itl: float | None = None  # mean gap between streamed token chunks; None when not streamed
    # Their mean without the longest tenth: the engine's step, where the mean also takes in the few long
    # steps that ran the prefill of requests arriving beside it (routing/slowdown/reading.py reads the decode
    # pace from it). Not the median: a speculative engine may send a step's tokens as several frames, and the
    # median of gaps half near zero and half a step long flips between the two.
    trimmed_itl: float | None = None
    # Share of the request's life (0..1) during which another backend of its device had requests in
    # flight: their weights are read every step too, so they slow this request whatever its own load.
    device_share: float = 0.0
    # The prompt's repetition share (records.Features.repetition): on a speculative engine it sets how many
    # drafts are accepted, so the router can tell repetitive from novel content apart in decode speed.
    repetition: float = 0.0
    # The backend's mean in-flight count over the request's life, itself included; None where unknown (a
    # decode probe's, an older snapshot's). `concurrency` is the load it met at dispatch: the first request
    # of a burst meets 1 and decodes at 16 (routing/slowdown/reading.py tells the two apart).
    mean_load: float | None = None

    @property
    def tpot(self) -> float | None:
        """Decode time per output token after the first one; None when there was no decode phase."""
        if self.error or self.ttft is None or self.output_tokens < 2:
            return None
        decode = self.e2e - self.ttft
        return decode / (self.output_tokens - 1) if decode > 0 else None

    @property
    def decode_tps(self) -> float | None:
        """Per-request decode speed in tokens/s (the inverse of TPOT)."""
        tpot = self.tpot
        return 1.0 / tpot if tpot else None
