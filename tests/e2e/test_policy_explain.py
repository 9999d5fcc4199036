"""POST /gateway/explain and `spark-gateway explain` against the running gateway: the candidates, their
filters or scores, and the chosen backend, with nothing sent upstream."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from e2e_harness import gateway_over_fleet, image_messages, send, text_messages

from gateway.cli import main


async def test_explain_names_every_candidate_and_the_choice_without_touching_an_engine() -> None:
    async with gateway_over_fleet("spark-home-35b") as stack:
        before = stack.upstream_requests()
        body = {"model": stack.model, "messages": image_messages(), "max_tokens": 64}
        response = await stack.http.post("/gateway/explain", json=body)
        assert stack.upstream_requests() == before
    assert response.status_code == 200
    explained = response.json()
    assert explained["profile"]["name"] == "vision"
    assert explained["chosen"] == "fp8-vision"
    assert explained["ranked"] == ["fp8-vision"]
    candidates = {c["backend"]: c for c in explained["candidates"]}
    assert candidates["fp8-vision"]["eligible"] is True
    assert candidates["fp8-vision"]["scores"] == {"objective": 1.0, "load": 1.0}  # adaptive, as shipped
    assert candidates["q475-dflash"]["eligible"] is False
    assert candidates["q475-dflash"]["reason"] == "modality: cannot take image input"


async def test_explain_command_prints_the_decision_of_the_running_gateway(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = tmp_path / "image.json"
    async with gateway_over_fleet("spark-home-35b") as stack:
        request.write_text(json.dumps({"model": stack.model, "messages": image_messages()}))
        before = stack.upstream_requests()
        code = await asyncio.to_thread(main, ["explain", "--url", stack.url, str(request)])
        assert stack.upstream_requests() == before
    out = capsys.readouterr().out
    assert code == 0
    assert "profile   vision (adaptive, objective ttft)" in out
    assert "chosen    fp8-vision (failover: none)" in out


async def test_explain_of_an_unknown_model_is_a_404() -> None:
    async with gateway_over_fleet("spark-home-35b") as stack:
        response = await stack.http.post("/gateway/explain", json={"model": "nope", "messages": []})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


async def test_explain_refuses_a_body_the_completion_routes_refuse() -> None:
    deep: object = {}
    for _ in range(299):
        deep = [deep]
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "extra": deep}
    async with gateway_over_fleet("spark-home-35b") as stack:
        body["model"] = stack.model
        response = await stack.http.post("/gateway/explain", content=json.dumps(body).encode())
        streamed = await stack.http.post("/gateway/explain", json={**body, "extra": 1, "stream": "true"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "extra"
    assert streamed.status_code == 400 and streamed.json()["error"]["param"] == "stream"


async def test_explain_command_shows_each_backends_adaptive_terms_on_the_shipped_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The built-in fleet's policy routes adaptively: once a backend has served a few streams, `explain`
    prints its sample count and predicted TTFT beside the prior, and the unmeasured one says so."""
    request = tmp_path / "chat.json"
    async with gateway_over_fleet("spark-duo-35b", state_dir=tmp_path / "state") as stack:
        for _ in range(6):
            await send(stack, text_messages(64), 8)
        request.write_text(json.dumps({"model": stack.model, "messages": text_messages(64), "max_tokens": 8}))
        code = await asyncio.to_thread(main, ["explain", "--url", stack.url, str(request)])
    out = capsys.readouterr().out
    assert code == 0
    assert "profile   default (adaptive, objective e2e)" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("fp8-")}
    table = out[out.index("BACKEND   SAMPLES") :]
    assert "TTFT S" in table.splitlines()[0] and "PRIOR" in table.splitlines()[0]
    measured = table.splitlines()[1:3]
    mtp = next(line.split() for line in measured if line.startswith("fp8-mtp"))
    base = next(line.split() for line in measured if line.startswith("fp8-base"))
    assert int(mtp[1]) >= 5 and float(mtp[2]) > 0  # samples, predicted TTFT
    assert base[1] == "0" and base[2] == "-" and "no prediction" in " ".join(base)
    assert rows  # the candidates table names both backends too
