"""Container labels <-> backends (gateway/engines/labels.py)."""

from __future__ import annotations

from gateway.engines import labels
from gateway.settings import EngineConfig


def test_a_managed_engines_labels_read_back_as_the_same_backend() -> None:
    spec = EngineConfig(
        name="coder", model="qwen-coder", image="img", port=8102, memory_gib=48, flavor="sglang"
    )
    read = labels.read(labels.of_engine(spec))
    assert not isinstance(read, str)
    assert (read.name, read.model, read.flavor, read.port) == ("coder", "qwen-coder", "sglang", 8102)
    assert (read.memory_gib, read.device, read.managed) == (48, "spark", True)


def test_labels_that_describe_no_backend_say_why() -> None:
    base = {labels.BACKEND: "x", labels.PORT: "8000"}
    assert labels.read({}) == f"no {labels.BACKEND} label"
    assert "integer" in str(labels.read({**base, labels.PORT: "eighty"}))
    assert "none of" in str(labels.read({**base, labels.FLAVOR: "tgi"}))
    found = labels.read(base)
    assert not isinstance(found, str) and found.model == "x" and not found.managed
