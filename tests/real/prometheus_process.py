"""A real Prometheus server (the Debian package's /usr/bin/prometheus) scraping one target every second
on 127.0.0.1, with its own storage directory; always stopped when the block ends."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llama_process import STOP_GRACE_S, _die_with_parent, free_port

PROMETHEUS = "prometheus"
READY_TIMEOUT_S = 30.0
CONFIG = """global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: spark-gateway
    scrape_interval: 1s
    scrape_timeout: 900ms
    metrics_path: /metrics
    static_configs:
      - targets: ["{target}"]
"""


@dataclass(frozen=True)
class Prometheus:
    port: int
    log_path: Path

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query over the HTTP API; the result vector."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as response:
            answer = json.loads(response.read())
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result


def binary() -> str | None:
    return shutil.which(PROMETHEUS)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextmanager
def running_prometheus(executable: str, target: str, work_dir: Path) -> Iterator[Prometheus]:
    """Start Prometheus scraping `target` ("127.0.0.1:PORT") and wait until it is ready."""
    config = work_dir / "prometheus.yml"
    config.write_text(CONFIG.format(target=target))
    port = free_port()
    log_path = work_dir / "prometheus.log"
    cmd = [
        executable,
        f"--config.file={config}",
        f"--storage.tsdb.path={work_dir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1h",
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _ready(port):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"prometheus did not start:\n{tail}")
            time.sleep(0.1)
        yield Prometheus(port, log_path)
    finally:
        process.terminate()
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_GRACE_S)
