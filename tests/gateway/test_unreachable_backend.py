"""A backend URL nothing listens at (a typo in the port) through a running gateway, as a newcomer meets
it: `check --config --probe` names it; past its warm-up bound /gateway/backends and /ready say
"unreachable", a WARNING says where, and a chat from the official openai client gets an error naming the
backend and the host:port within 5 s, instead of waiting for a warm-up that never ends."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from pathlib import Path

import aiohttp
import openai
import pytest
from gateway_fakes import running_gateway, settings_for

from gateway.cli import main


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_url_nothing_listens_at_is_called_unreachable_and_a_chat_told_so_within_5s(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = closed_port()
    backend = {"name": "typo", "url": f"http://127.0.0.1:{port}", "flavor": "vllm", "warmup_s": 1.0}
    settings = settings_for({"typo": backend["url"]}, backends=[backend])
    where = f"127.0.0.1:{port}"
    with caplog.at_level(logging.INFO, logger="gateway.prober"):
        async with running_gateway(settings, wait_ready=False) as (url, _):
            client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30)
            started = time.monotonic()
            # Sent at once, while the backend may still be loading: held, then told when it is unreachable.
            with pytest.raises(openai.APIStatusError) as first:
                await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            waited = time.monotonic() - started
            with pytest.raises(openai.APIStatusError) as later:
                await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            async with aiohttp.ClientSession() as session:
                async with session.get(url + "/gateway/backends") as response:
                    listed = await response.json()
                async with session.get(url + "/ready") as response:
                    ready = (response.status, await response.json())
            await client.close()
    assert waited < 5.0, waited
    for error in (first.value, later.value):
        assert error.status_code == 503
        assert "typo" in error.message and where in error.message and "nothing listens" in error.message
    backends = listed["backends"] if isinstance(listed, dict) else listed
    assert [b["status"] for b in backends] == ["unreachable"]
    assert ready[0] == 503 and ready[1]["not_ready"]["typo"].startswith("unreachable: nothing listens at")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("typo is unreachable" in line and where in line for line in warned), warned


def test_check_config_probe_names_the_backend_nothing_listens_at(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = closed_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"backends:\n  - name: typo\n    url: http://127.0.0.1:{port}\n"
        "pools:\n  - model: m\n    backends: [typo]\nstate_dir: null\n"
    )
    assert main(["check", "--config", str(config)]) == 0  # the file itself is fine
    assert main(["check", "--config", str(config), "--probe"]) == 1
    err = capsys.readouterr().err
    assert f"backend typo: nothing listens at 127.0.0.1:{port} (connection refused)" in err
    assert err.count("backend typo") == 1  # reached once


async def test_the_503_while_warming_says_what_the_probes_meet() -> None:
    port = closed_port()
    backend = {"name": "typo", "url": f"http://127.0.0.1:{port}", "flavor": "vllm"}  # bound: 10 min
    settings = settings_for({"typo": backend["url"]}, backends=[backend], queue={"timeout_s": 1.0})
    async with running_gateway(settings, wait_ready=False) as (url, _):
        await asyncio.sleep(0.2)  # a probe has met the refusal
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30)
        with pytest.raises(openai.APIStatusError) as refused:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        await client.close()
    assert refused.value.status_code == 503
    assert f"connection refused at 127.0.0.1:{port}" in refused.value.message
