"""Start one real llama-server on 127.0.0.1, watch its readiness from the first instant, and stop it.

llama-server only logs its address after the model has loaded, so a ``--port 0`` server cannot be reached
while it loads. To observe the loading phase the port is chosen here (bind to port 0, release, pass it
on); if another process takes it in between, llama-server exits with a bind error and is started again
on a new port.
"""

from __future__ import annotations

import ctypes
import http.client
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

READY_TIMEOUT_S = 120.0
POLL_INTERVAL_S = 0.005
STOP_GRACE_S = 10.0
BIND_ATTEMPTS = 3
PR_SET_PDEATHSIG = 1


@dataclass
class Readiness:
    """What /health answered between process start and the first 200, with times since the spawn."""

    refused_until_s: float | None = None
    first_503_s: float | None = None
    last_503_s: float | None = None
    loading_bodies: set[bytes] = field(default_factory=set)
    loading_content_types: set[str] = field(default_factory=set)
    other_statuses: list[int] = field(default_factory=list)
    ready_s: float = 0.0
    ready_body: bytes = b""

    @property
    def loading_window_s(self) -> float:
        if self.first_503_s is None or self.last_503_s is None:
            return 0.0
        return self.last_503_s - self.first_503_s


@dataclass
class LlamaServer:
    name: str
    port: int
    args: list[str]
    process: subprocess.Popen[bytes]
    log_path: Path
    readiness: Readiness

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


class ServerStartError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _poll_health(port: int, timeout_s: float) -> tuple[int, str, bytes] | None:
    """One /health probe: (status, content type, body), or None when nothing listens yet."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", "/health")
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read()
    except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected):
        return None
    finally:
        conn.close()


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def wait_until_ready(process: subprocess.Popen[bytes], port: int, log_path: Path) -> Readiness:
    """Poll /health from spawn until 200, recording every answer; raise if the process dies or hangs."""
    readiness = Readiness()
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < READY_TIMEOUT_S:
        if process.poll() is not None:
            raise ServerStartError(f"llama-server exited with {process.returncode}:\n{_tail(log_path)}")
        answer = _poll_health(port, timeout_s=5.0)
        if answer is None:
            readiness.refused_until_s = elapsed
        elif answer[0] == 200:
            readiness.ready_s, readiness.ready_body = elapsed, answer[2]
            return readiness
        elif answer[0] == 503:
            readiness.first_503_s = readiness.first_503_s if readiness.first_503_s is not None else elapsed
            readiness.last_503_s = elapsed
            readiness.loading_bodies.add(answer[2])
            readiness.loading_content_types.add(answer[1])
        else:
            readiness.other_statuses.append(answer[0])
        time.sleep(POLL_INTERVAL_S)
    raise ServerStartError(f"llama-server not ready after {READY_TIMEOUT_S:.0f}s:\n{_tail(log_path)}")


def stop(server: LlamaServer) -> None:
    """SIGTERM, then SIGKILL after a grace period: the process never outlives the test session."""
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(timeout=STOP_GRACE_S)


def _die_with_parent() -> None:
    """Runs in the child before exec: the kernel kills the server if the test process dies untidily."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _spawn(binary: Path, args: list[str], port: int, log_path: Path) -> subprocess.Popen[bytes]:
    cmd = [str(binary), *args, "--host", "127.0.0.1", "--port", str(port)]
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(cmd)}\n".encode())
        log.flush()
        return subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent
        )


def start(name: str, binary: Path, args: list[str], log_dir: Path) -> LlamaServer:
    """Start llama-server with ``args`` (everything but host and port) and wait until it is ready."""
    log_path = log_dir / f"{name}.log"
    last_error: ServerStartError | None = None
    for _ in range(BIND_ATTEMPTS):
        port = free_port()
        process = _spawn(binary, args, port, log_path)
        try:
            readiness = wait_until_ready(process, port, log_path)
        except ServerStartError as error:
            last_error = error
            if process.poll() is None:
                process.kill()
                process.wait(timeout=STOP_GRACE_S)
            if "couldn't bind" in log_path.read_text(errors="replace"):
                continue
            raise
        return LlamaServer(name, port, args, process, log_path, readiness)
    raise ServerStartError(f"could not bind a port in {BIND_ATTEMPTS} attempts") from last_error
