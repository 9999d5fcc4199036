"""Settings for the gateway in front of the real vLLM pair: pool `gemma` (both), `gemma-plain` and
`gemma-spec` (one each), both backends with the `vllm` flavor, engine /metrics scraped every half second."""

from __future__ import annotations

from pathlib import Path

from gateway_harness import FAST_PROBE, PLAIN, PLAIN_POOL, POOL, SPEC, SPEC_POOL
from vllm_process import SERVED_NAME

from gateway.settings import Settings, load_settings

SCRAPE_INTERVAL_S = 0.5


def vllm_pair_settings(plain_url: str, spec_url: str, policy: Path) -> Settings:
    backends = [
        {"name": PLAIN, "url": plain_url, "flavor": "vllm"},
        {"name": SPEC, "url": spec_url, "flavor": "vllm"},
    ]
    # vLLM checks the model name: every pool sends the servers their one served name.
    served = {PLAIN: SERVED_NAME, SPEC: SERVED_NAME}
    pools = [
        {"model": POOL, "backends": [PLAIN, SPEC], "served_names": served},
        {"model": PLAIN_POOL, "backends": [PLAIN], "served_names": served},
        {"model": SPEC_POOL, "backends": [SPEC], "served_names": served},
    ]
    return load_settings(
        None, backends=backends, pools=pools, policy=policy, probe=FAST_PROBE, state_dir=None,
        measurement={"scrape_interval_s": SCRAPE_INTERVAL_S},
    )  # fmt: skip
