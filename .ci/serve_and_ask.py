"""Start an installed gateway on a twin fleet, stream one chat through it with the official openai client,
and stop it. Exit 0 only if all of it worked; the server's log is printed when something did not.

    python .ci/serve_and_ask.py [--fleet deploy/fleets/spark-duo-35b.yaml] [--cwd DIR] -- COMMAND...

COMMAND is how the installed gateway is started (e.g. `/tmp/venv/bin/spark-gateway`, or
`env PYTHONPATH=... spark-gateway`); `serve [--fleet FLEET] --port PORT` is appended. Run it with a python
that has the openai package (the test venv's): the server under test keeps its own clean install.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from openai import OpenAI
from openai.types.chat import ChatCompletionMessageParam

# The twin fleet's simulated 5-minute warm-up takes 15 s at the default time scale; this bounds a hang.
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0


def main() -> int:
    args = _parse()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    fleet = ["--fleet", str(args.fleet.resolve())] if args.fleet is not None else []
    command = [*args.command, "serve", *fleet, "--port", str(port)]
    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen(
            command,
            cwd=args.cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so stopping it reaches anything it started
        )
        try:
            answered = _check(url, server, command)
        finally:
            stopped = _stop(server)
        if not (answered and stopped):
            _print_log(log)
        return 0 if answered and stopped else 1


def _check(url: str, server: subprocess.Popen[bytes], command: list[str]) -> bool:
    try:
        _wait_ready(url, server)
        print(_ask(url))
        print(_status_page(url))
        return True
    except Exception as exc:  # any failure fails the smoke: say which command and what went wrong
        print(f"serve_and_ask: {' '.join(command)}: {exc!r}", file=sys.stderr)
        return False


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", type=Path, help="default: none, the built-in twin fleet")
    parser.add_argument("--cwd", type=Path, default=Path.cwd(), help="the server's working directory")
    parser.add_argument("command", nargs="+", help="how to start the installed gateway")
    return parser.parse_args()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_ready(url: str, server: subprocess.Popen[bytes]) -> None:
    """Poll /ready until 200; fail at once if the server exits, and after READY_TIMEOUT_S at the latest."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with {server.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url + "/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass  # not listening yet, or 503 while the twin engines warm up
        time.sleep(0.5)
    raise TimeoutError(f"{url}/ready did not answer 200 within {READY_TIMEOUT_S:g} s")


def _ask(url: str) -> str:
    """One streamed chat with the official client; the answer must have text and name its backend."""
    client = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    model = client.models.list().data[0].id
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello."}]
    with client.chat.completions.with_streaming_response.create(
        model=model, messages=messages, max_tokens=16, stream=True
    ) as response:
        backend = response.headers.get("x-gateway-backend")
        chunks = list(response.parse())
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    if not text or not backend:
        raise AssertionError(f"empty answer or no backend header: {text!r}, backend {backend!r}")
    return f"ok: {model} answered {len(chunks)} chunks via backend {backend}: {text[:40]!r}"


def _status_page(url: str) -> str:
    """The status page and every file it loads come from the installed package (package data), and the
    feed it reads holds the chat just sent."""
    files = {"/ui": b'src="/ui/app.js"', "/ui/app.js": b"/gateway/decisions", "/ui/charts.js": b"LineChart"}
    files["/ui/style.css"] = b"prefers-color-scheme"
    for path, marker in files.items():
        with urllib.request.urlopen(url + path, timeout=10) as response:
            body = response.read()
        if response.status != 200 or marker not in body:
            raise AssertionError(f"{path}: HTTP {response.status}, {len(body)} bytes without {marker!r}")
    with urllib.request.urlopen(url + "/gateway/decisions", timeout=10) as response:
        feed = json.loads(response.read())["decisions"]
    if not feed or feed[0]["status"] != 200:
        raise AssertionError(f"the decision feed does not hold the chat just answered: {feed!r}")
    return f"ok: /ui and its {len(files) - 1} files served; the feed shows the chat via {feed[0]['backend']}"


def _stop(server: subprocess.Popen[bytes]) -> bool:
    """SIGTERM (the gateway drains; nothing is in flight), SIGKILL to its group if it hangs; True when
    it stopped by itself in time."""
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=STOP_TIMEOUT_S)
        return True
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=STOP_TIMEOUT_S)
        print(f"serve_and_ask: the server ignored SIGTERM for {STOP_TIMEOUT_S:g} s", file=sys.stderr)
        return False


def _print_log(log: IO[bytes]) -> None:
    log.seek(0)
    tail = log.read().decode(errors="replace").splitlines()[-40:]
    print("--- server log (last lines) ---", *tail, sep="\n", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
