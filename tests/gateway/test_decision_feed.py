"""The decision feed (proxy/decision_feed.py) and the status page's routes (api/ui.py) on a running gateway:
entries made as requests are sent, completed when they finish, bounded; /ui open, its data admin-only."""

from __future__ import annotations

import re

import aiohttp
from gateway_fakes import FakeEngine, running_gateway, settings_for

from gateway.api.auth import hash_key
from gateway.api.ui import PAGE_POLLS
from gateway.policy.load import PolicyWatcher
from gateway.proxy.decision_feed import DecisionFeed, reason
from gateway.proxy.exchange import Job
from gateway.records import Candidate, Decision, RequestRecord, Spill
from gateway.settings import PoolConfig

ADMIN, CLIENT = "admin-key-for-the-feed", "client-key-for-the-feed"


def _job(request_id: str, ranked: tuple[str, ...], decision: Decision | None = None) -> Job:
    pool = PoolConfig(model="m", backends=("a", "b"))
    body = {"model": "m", "messages": []}
    return Job(
        request_id, "chat", "/v1/chat/completions", pool, body, b"", 0.0, "chat", ranked, decision=decision
    )


def test_the_feed_keeps_the_newest_entries_up_to_its_capacity() -> None:
    feed = DecisionFeed(capacity=3)
    for i in range(5):
        feed.dispatched(_job(f"r{i}", ("a", "b")), "a")
    assert len(feed) == 3
    assert [e["request_id"] for e in feed.since()] == ["r4", "r3", "r2"]
    assert [e["request_id"] for e in feed.since(seq=4)] == ["r4"]  # seq 5 only
    feed.finished(RequestRecord("r0", "m", "chat", "chat", True, backend="a", status=200))  # pushed out
    assert all(e["status"] is None for e in feed.since())


def test_a_finished_request_carries_its_answering_backend_and_measured_speed() -> None:
    feed = DecisionFeed()
    decision = Decision("chat", ("a", "b"), predicted={"a": (0.2, 0.02)})
    feed.dispatched(_job("r1", ("a", "b"), decision), "a")
    record = RequestRecord("r1", "m", "chat", "chat", True, backend="b", status=200, ttft=0.5, tpot=0.025)
    feed.finished(record)
    [entry] = feed.since()
    assert (entry["chosen"], entry["runner_up"], entry["backend"]) == ("a", "b", "b")
    assert entry["predicted"] == {"ttft_s": 0.2, "decode_tps": 50.0}
    assert entry["measured"]["ttft_s"] == 0.5 and entry["measured"]["decode_tps"] == 40.0


def test_the_reason_quotes_the_decision() -> None:
    scored = Candidate("b", eligible=True, reason="rank 1", score=0.9, details={"adaptive": 0.8})
    spill = Spill("a", "b", "12 in flight, capacity 8")
    decision = Decision("chat", ("b", "a"), (scored,), spill=spill)
    text = reason(decision, "b", ("b", "a"))
    assert "spilled from a (saturated: 12 in flight, capacity 8) to b" in text
    assert "rank 1 score 0.90 (adaptive 0.80)" in text
    assert "waited for it" in reason(Decision("chat", ("a",)), "b", ("a", "b"))


async def _get(session: aiohttp.ClientSession, url: str, key: str | None = None) -> tuple[int, str]:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    async with session.get(url, headers=headers) as response:
        return response.status, await response.text()


async def test_requests_sent_through_the_gateway_appear_in_the_feed_with_their_backend(
    engines: list[FakeEngine],
) -> None:
    settings = settings_for({"a": engines[0].url, "b": engines[1].url})
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    async with running_gateway(settings) as (url, _), aiohttp.ClientSession() as session:
        answered = {}
        for _ in range(4):
            async with session.post(url + "/v1/chat/completions", json=body) as response:
                assert response.status == 200
                await response.read()
                answered[response.headers["x-request-id"]] = response.headers["x-gateway-backend"]
        async with session.get(url + "/gateway/decisions?limit=10") as response:
            feed = (await response.json())["decisions"]
        status, _ = await _get(session, url + "/gateway/decisions?limit=x")
    assert {e["request_id"]: e["backend"] for e in feed} == answered
    assert all(e["status"] == 200 and e["api"] == "chat" for e in feed)
    assert status == 400


async def test_the_page_is_open_and_its_data_needs_the_admin_key(engines: list[FakeEngine]) -> None:
    auth = {"admin_key_hash": hash_key(ADMIN), "client_key_hashes": [hash_key(CLIENT)]}
    settings = settings_for({"a": engines[0].url}, auth=auth)
    async with running_gateway(settings, wait_ready=False) as (url, _), aiohttp.ClientSession() as session:
        for path in ("/ui", "/ui/app.js", "/ui/charts.js", "/ui/style.css"):
            status, text = await _get(session, url + path)
            assert status == 200 and len(text) > 500, path
        assert (await _get(session, url + "/ui/../gateway/backends"))[0] in (401, 404)
        assert (await _get(session, url + "/ui/secret.txt"))[0] == 404
        for path in PAGE_POLLS:
            assert (await _get(session, url + path))[0] == 401, path
            assert (await _get(session, url + path, CLIENT))[0] == 403, path
            assert (await _get(session, url + path, ADMIN))[0] == 200, path


def test_the_policy_document_names_the_last_reload_and_its_error(tmp_path: object) -> None:
    from pathlib import Path

    from gateway.api.ui import policy_document

    folder = Path(str(tmp_path))
    source = Path(__file__).resolve().parents[2] / "policies" / "spark-home.yaml"
    path = folder / "policy.yaml"
    path.write_bytes(source.read_bytes())
    watcher = PolicyWatcher(path)
    assert policy_document(watcher)["last_reload"] is None
    path.write_text(source.read_text().replace("profiles:", "profiles: 3\nnot_profiles:", 1))
    watcher.reload()
    document = policy_document(watcher)
    assert document["last_reload"]["result"] == "error"
    assert re.search(rf"{re.escape(str(path))}:\d+: ", document["last_error"] or ""), document["last_error"]
    assert document["sha256"] == watcher.current.sha256
    assert policy_document(None) == {"configured": False}
