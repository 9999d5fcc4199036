"""Compare what a benchmark client measured with what the gateway recorded for the same requests.

The gateway side comes from its /metrics histograms: the movement of `_sum` and `_count` between a
scrape before and one after the run gives the mean TTFT and ITL, and the output-token counter with the
request-duration sum gives output tokens per second of request time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway_harness import histogram_delta


@dataclass(frozen=True)
class Figures:
    requests: float
    mean_ttft_s: float
    mean_itl_s: float
    output_tokens: float
    output_tok_s: float  # output tokens / summed request durations (sequential runs: ~ the wall time)

    def deviation(self, other: Figures) -> dict[str, float]:
        """Relative difference of each timing figure, (self - other) / other."""
        pairs = {
            "ttft": (self.mean_ttft_s, other.mean_ttft_s),
            "itl": (self.mean_itl_s, other.mean_itl_s),
            "output_tok_s": (self.output_tok_s, other.output_tok_s),
        }
        return {name: (mine - theirs) / theirs for name, (mine, theirs) in pairs.items()}


def gateway_figures(
    before: Mapping[str, float], after: Mapping[str, float], backend: str, profile: str = "default"
) -> Figures:
    labels = f'backend="{backend}",profile="{profile}"'
    ttft_sum, ttft_n = histogram_delta(before, after, "gateway_ttft_seconds", labels)
    itl_sum, itl_n = histogram_delta(before, after, "gateway_itl_seconds", labels)
    e2e_sum, e2e_n = histogram_delta(before, after, "gateway_request_duration_seconds", labels)
    key = f"gateway_output_tokens_total{{{labels}}}"
    tokens = after.get(key, 0.0) - before.get(key, 0.0)
    return Figures(
        requests=e2e_n,
        mean_ttft_s=ttft_sum / ttft_n if ttft_n else 0.0,
        mean_itl_s=itl_sum / itl_n if itl_n else 0.0,
        output_tokens=tokens,
        output_tok_s=tokens / e2e_sum if e2e_sum else 0.0,
    )
