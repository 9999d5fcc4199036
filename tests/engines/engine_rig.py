"""A real Docker Engine API for the engine tests: podman's, served on a unix socket in a temp folder.

The session fixture follows docs/engines.md ("Trying it without Docker"): a containers.conf with lower
ulimits and runc, a busybox image imported offline, `podman system service` on a socket of its own,
stopped by its PID at the end. Each test's twin engines run in containers from that image, with the
host's Python, the virtualenv and the repository bind-mounted read-only.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.settings import Settings

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/spark-gateway-test-busybox:latest"
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
"""
TIME_SCALE = 20.0  # simulated seconds per real second in the twin engines


@dataclass(frozen=True)
class Podman:
    url: str  # unix:///.../podman.sock, for docker.DockerClient(base_url=...)
    folder: Path
    token: str  # unique to this session: names of its engines and containers carry it

    def client(self) -> Any:
        import docker

        return docker.DockerClient(base_url=self.url)


def _missing() -> str | None:
    if importlib.util.find_spec("docker") is None:
        return "the `docker` Python package is not installed (pip install docker)"
    for tool, package in (("podman", "podman"), ("runc", "runc")):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install {package})"
    if shutil.which("busybox") is None:
        return "`busybox` is not installed (apt-get install busybox-static)"
    return None


def _busybox_image(folder: Path, env: dict[str, str]) -> None:
    root = folder / "rootfs"
    (root / "bin").mkdir(parents=True)
    shutil.copy(shutil.which("busybox") or "/bin/busybox", root / "bin" / "busybox")
    (root / "bin" / "sh").symlink_to("busybox")
    with tarfile.open(folder / "busybox.tar", "w") as tar:
        tar.add(root, arcname=".")
    command = ["podman", "import", "--change", 'CMD ["/bin/sh"]', str(folder / "busybox.tar"), IMAGE]
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    missing = _missing()
    if missing is not None:
        pytest.skip(f"engine tests need podman's Docker API: {missing}")
    folder = tmp_path_factory.mktemp("podman")
    (folder / "containers.conf").write_text(CONTAINERS_CONF)
    env = {**os.environ, "CONTAINERS_CONF": str(folder / "containers.conf")}
    _busybox_image(folder, env)
    socket = folder / "podman.sock"
    with open(folder / "service.log", "wb") as log:
        service = subprocess.Popen(
            ["podman", "system", "service", "--time=0", f"unix://{socket}"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    found = Podman(f"unix://{socket}", folder, uuid.uuid4().hex[:8])
    try:
        _wait_for_ping(found, service)
        yield found
    finally:
        _remove_containers(found)
        service.send_signal(signal.SIGTERM)
        try:
            service.wait(10)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait(5)


def _wait_for_ping(podman: Podman, service: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 15
    while True:
        if service.poll() is not None:
            log = (podman.folder / "service.log").read_text(errors="replace")
            pytest.fail(f"podman system service exited: {log[-2000:]}")
        try:
            if podman.client().ping():
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def _remove_containers(podman: Podman) -> None:
    """The containers this session made (their names carry its token), whatever state they are in."""
    try:
        client = podman.client()
        for container in client.containers.list(all=True):
            if podman.token in container.name:
                container.remove(force=True)
    except Exception as exc:  # cleanup must not hide the test's own failure
        print(f"could not remove the test containers: {exc}", file=sys.stderr)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def twin_command(folder: Path, name: str, model: str, port: int) -> list[str]:
    """A one-engine twin fleet served by `spark-gateway sim`, as a container's command."""
    engine = {"name": name, "flavor": "vllm", "port": port, "served_model_name": model, "device": "d"}
    fleet = folder / f"fleet-{name}.yaml"
    fleet.write_text(yaml.safe_dump({"name": name, "devices": {"d": {}}, "engines": [engine]}))
    return [sys.executable, "-m", "gateway", "sim", "--fleet", str(fleet), "--time-scale", str(TIME_SCALE)]


def twin_volumes(folder: Path) -> dict[str, str]:
    """Host path -> "path:ro": what the twin needs from the host, at the same paths."""
    paths = ["/usr", "/lib", "/lib64", sys.base_prefix, sys.prefix, str(REPO), str(folder)]
    return {p: f"{p}:ro" for p in dict.fromkeys(paths) if Path(p).exists()}


def wait_health(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"{url} never answered /health"
        time.sleep(0.1)


def engine(podman: Podman, name: str, model: str, **fields: Any) -> dict[str, Any]:
    """A managed twin engine's `engines:` entry: the twin in a busybox container, on a free port."""
    port = free_port()
    return {
        "name": name,
        "model": model,
        "image": IMAGE,
        "command": twin_command(podman.folder, name, model, port),
        "volumes": twin_volumes(podman.folder),
        "working_dir": str(REPO),
        "port": port,
        "memory_gib": 6,
        "device": "spark",
        "warmup_s": 3,
        "idle_ttl_s": None,
        **fields,
    }


def gateway_settings(podman: Podman, engines: Sequence[dict[str, Any]] = (), **fields: Any) -> Settings:

    control = {
        "docker_url": podman.url,
        "min_residency_s": 0,
        "drain_timeout_s": 10,
        "stop_timeout_s": 2,
        "resync_s": 60,  # longer than any test: what they see of hand-made changes comes from the events
        **fields.pop("engine_control", {}),
    }
    probe = {"interval_s": 0.5, "starting_interval_s": 0.1, "timeout_s": 1.0, "startup_grace_s": 30}
    return Settings(
        engines=tuple(engines),
        engine_control=control,
        probe=probe,
        state_dir=None,
        **{"queue": {"timeout_s": 20, "warming_wait_s": 20}, **fields},
    )
