"""HTTP surfaces of the engines the twin imitates: vLLM, SGLang and llama.cpp's llama-server."""

from __future__ import annotations

from gateway.sim.flavors.base import Flavor
from gateway.sim.flavors.llamacpp import LlamaCppFlavor
from gateway.sim.flavors.sglang import SglangFlavor
from gateway.sim.flavors.vllm import VllmFlavor


def flavor_for(name: str) -> Flavor:
    flavors: dict[str, type[Flavor]] = {
        "vllm": VllmFlavor,
        "sglang": SglangFlavor,
        "llamacpp": LlamaCppFlavor,
    }
    try:
        return flavors[name]()
    except KeyError:
        raise ValueError(f"unknown engine flavor {name!r}; known: {sorted(flavors)}") from None
