"""Start the real vLLM pair (one plain, one with n-gram speculation) on 127.0.0.1, and stop it.

Both servers are spawned at once (loading overlaps) in process groups of their own, so stopping one
reaches vLLM's engine-core child too: SIGTERM to the group, SIGKILL after a grace period. They also get
``PR_SET_PDEATHSIG`` so a test process killed without teardown leaves no server behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from llama_process import _die_with_parent, _poll_health, _tail, free_port
from vllm_prep import PreparedVllm

SERVED_NAME = "gemma"
CONTEXT_SIZE = 2048
READY_TIMEOUT_S = 600.0
POLL_INTERVAL_S = 0.05
STOP_GRACE_S = 15.0
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
# Offline (the model is a local folder), one KV GiB each so two fit beside everything else, no pinning
# of OpenMP threads (the two servers share two cores).
SERVER_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_NO_USAGE_STATS": "1",
    "OMP_NUM_THREADS": "1",
}


@dataclass
class VllmReadiness:
    """What /health answered between spawn and the first 200 (seconds since spawn)."""

    refused_until_s: float | None = None
    other_statuses: list[int] = field(default_factory=list)
    ready_s: float = 0.0


@dataclass
class VllmServer:
    name: str
    port: int
    args: list[str]
    process: subprocess.Popen[bytes]
    log_path: Path
    spawned_at: float
    readiness: VllmReadiness = field(default_factory=VllmReadiness)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass(frozen=True)
class VllmPair:
    plain: VllmServer
    speculative: VllmServer
    prepared: PreparedVllm


class VllmStartError(RuntimeError):
    pass


def server_args(model: Path, port: int, speculative: bool) -> list[str]:
    args = [
        "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(CONTEXT_SIZE),
        "--max-num-seqs", "4", "--dtype", "bfloat16", "--enforce-eager",
    ]  # fmt: skip
    if speculative:
        args += ["--speculative-config", json.dumps(NGRAM)]
    return args


def spawn(name: str, prepared: PreparedVllm, speculative: bool, log_dir: Path) -> VllmServer:
    port = free_port()
    args = server_args(prepared.model_dir, port, speculative)
    log_path = log_dir / f"vllm-{name}.log"
    with log_path.open("ab") as log:
        log.write(f"$ {prepared.python} {' '.join(args)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            [str(prepared.python), *args],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, **SERVER_ENV}, start_new_session=True, preexec_fn=_die_with_parent,
        )  # fmt: skip
    return VllmServer(name, port, args, process, log_path, time.monotonic())


def _poll_once(server: VllmServer) -> bool:
    """One /health probe of a starting server, recorded; True once it answered 200."""
    if server.process.poll() is not None:
        raise VllmStartError(
            f"vLLM {server.name} exited with {server.process.returncode}:\n{_tail(server.log_path)}"
        )
    elapsed = time.monotonic() - server.spawned_at
    answer = _poll_health(server.port, timeout_s=5.0)
    if answer is None:
        server.readiness.refused_until_s = elapsed
        return False
    if answer[0] != 200:
        server.readiness.other_statuses.append(answer[0])
        return False
    server.readiness.ready_s = elapsed
    return True


def wait_all_ready(servers: list[VllmServer]) -> None:
    """Poll every server's /health in turn until each answered 200 (loading overlaps, and each server's
    refusals are seen from its spawn); raise if one dies or the timeout passes."""
    pending = list(servers)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while pending:
        if time.monotonic() > deadline:
            tails = "\n".join(f"{s.name}:\n{_tail(s.log_path)}" for s in pending)
            raise VllmStartError(f"vLLM not ready after {READY_TIMEOUT_S:.0f}s:\n{tails}")
        pending = [server for server in pending if not _poll_once(server)]
        time.sleep(POLL_INTERVAL_S)


def stop(server: VllmServer) -> None:
    """SIGTERM the server's process group, SIGKILL it after the grace period."""
    if server.process.poll() is not None:
        return
    pgid = server.process.pid  # start_new_session: the server leads its own group
    try:
        os.killpg(pgid, signal.SIGTERM)
        server.process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(pgid, signal.SIGKILL)
        server.process.wait(timeout=STOP_GRACE_S)
    except ProcessLookupError:
        pass
    with contextlib.suppress(ProcessLookupError):  # the engine-core child may outlive its parent briefly
        os.killpg(pgid, signal.SIGKILL)


@contextmanager
def running_vllm_pair(prepared: PreparedVllm, log_dir: Path) -> Iterator[VllmPair]:
    servers: list[VllmServer] = []
    try:
        for name, speculative in (("plain", False), ("speculative", True)):
            servers.append(spawn(name, prepared, speculative, log_dir))
        wait_all_ready(servers)
        yield VllmPair(servers[0], servers[1], prepared)
    finally:
        for server in servers:
            stop(server)
