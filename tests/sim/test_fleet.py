from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.sim.fleet import FleetSpec, load_fleet

FLEETS = Path(__file__).resolve().parents[2] / "deploy" / "fleets"


def test_spark_duo_has_a_plain_and_an_mtp_vllm_engine_of_one_model_on_one_device() -> None:
    fleet = load_fleet(FLEETS / "spark-duo-35b.yaml")
    base, mtp = fleet.engine("fp8-base"), fleet.engine("fp8-mtp")
    assert (base.port, mtp.port) == (8101, 8102)
    assert base.flavor == mtp.flavor == "vllm"
    assert base.served_model_name == mtp.served_model_name == "Qwen/Qwen3.6-35B-A3B-FP8"
    assert base.perf.speculative is None and mtp.perf.speculative is not None
    assert mtp.perf.speculative.k == 2
    assert base.device == mtp.device and len(fleet.devices) == 1
    assert base.vision and base.context_length == 131072
    assert fleet.policy == "policies/spark-mtp-split.yaml"


def test_spark_pair_puts_long_context_sglang_and_8k_vllm_on_two_devices() -> None:
    fleet = load_fleet(FLEETS / "spark-pair-27b.yaml")
    sglang, vllm = fleet.engine("sglang-fp8-ngram"), fleet.engine("vllm-nvfp4-mtp")
    assert (sglang.flavor, vllm.flavor) == ("sglang", "vllm")
    assert sglang.device != vllm.device
    assert vllm.context_length == 8192 < sglang.context_length
    assert sglang.perf.speculative and sglang.perf.speculative.method == "ngram"
    assert vllm.perf.speculative and vllm.perf.speculative.k == 3


def test_spark_home_has_a_text_only_dflash_quant_and_a_vision_build() -> None:
    fleet = load_fleet(FLEETS / "spark-home-35b.yaml")
    quant, vision = fleet.engine("q475-dflash"), fleet.engine("fp8-vision")
    assert not quant.vision and vision.vision
    assert quant.perf.speculative and quant.perf.speculative.method == "dflash"
    assert quant.perf.speculative.k == 3 and vision.perf.speculative is None


def test_engine_naming_an_unknown_device_is_rejected() -> None:
    with pytest.raises(ValidationError, match="names device"):
        FleetSpec.model_validate(
            {"name": "f", "engines": [{"name": "a", "served_model_name": "m", "device": "nowhere"}]}
        )


def test_duplicate_ports_are_rejected() -> None:
    engines = [{"name": n, "served_model_name": "m", "port": 9000} for n in ("a", "b")]
    with pytest.raises(ValidationError, match="ports must be unique"):
        FleetSpec.model_validate({"name": "f", "engines": engines})
