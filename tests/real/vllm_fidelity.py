"""What the twin's vLLM flavor and the real vLLM answer, reduced to the parts that must agree: key sets,
framing, statuses, error types and the wording of messages with their numbers masked, metric family names
and label names. Each probe returns {aspect: observed shape}; comparing two of them lists the differences."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from engine_http import get, metric_types, post, sse_data, sse_events

Shape = Mapping[str, object]
NUMBER = re.compile(r"\d+")

TOO_LONG_PROMPT = " ".join(["apple"] * 3000)


def _keys(value: object) -> list[str]:
    return sorted(value) if isinstance(value, dict) else []


def _masked(text: object) -> str:
    return NUMBER.sub("N", str(text))


def _error_shape(name: str, status: int, body: bytes) -> dict[str, object]:
    """The error's structure under `name`, its wording (numbers masked) apart under `name.message`."""
    try:
        error = json.loads(body).get("error", {})
    except ValueError:
        return {name: {"status": status, "body": body[:80].decode(errors="replace")}}
    structure = {"status": status, "keys": _keys(error), "code": error.get("code"),
                 "type": error.get("type"), "param": error.get("param")}  # fmt: skip
    return {name: structure, f"{name}.message": _masked(error.get("message"))}


def _chat(max_tokens: int, **extra: Any) -> dict[str, Any]:
    content = "Repeat this sentence three times: the cat sat on the mat."
    return {"model": "gemma", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0, **extra}  # fmt: skip


def models_shape(port: int) -> dict[str, object]:
    body = get(port, "/v1/models").json()
    card = body["data"][0]
    return {
        "models.top": _keys(body),
        "models.card": _keys(card),
        "models.permission": _keys(card["permission"][0]),
        "models.values": (card["object"], card["owned_by"], card["max_model_len"], card["parent"]),
    }


def stream_shape(port: int) -> dict[str, object]:
    response = post(port, "/v1/chat/completions",
                    _chat(6, stream=True, stream_options={"include_usage": True}))  # fmt: skip
    events = sse_events(response.body)
    payloads = [json.loads(p) for p in sse_data(response.body) if p != "[DONE]"]
    role, finish, usage = payloads[0], payloads[-2], payloads[-1]
    return {
        "stream.status": response.status,
        "stream.content_type": response.headers.get("content-type", "").split(";")[0],
        "stream.framing": sorted({e.split(":", 1)[0] for e in events}),
        "stream.done_last": sse_data(response.body)[-1] == "[DONE]",
        "stream.role_chunk": (_keys(role), _keys(role["choices"][0]), role["choices"][0]["delta"]),
        "stream.content_chunk": (_keys(payloads[1]), _keys(payloads[1]["choices"][0])),
        "stream.finish_chunk": (
            _keys(finish),
            _keys(finish["choices"][0]),
            finish["choices"][0]["finish_reason"],
        ),
        "stream.usage_chunk": (_keys(usage), usage["choices"], _keys(usage["usage"])),
    }


def response_shape(port: int) -> dict[str, object]:
    chat = post(port, "/v1/chat/completions", _chat(4)).json()
    text = post(port, "/v1/completions", {"model": "gemma", "prompt": "one two three", "max_tokens": 4,
                                          "temperature": 0}).json()  # fmt: skip
    return {
        "chat.top": _keys(chat),
        "chat.choice": _keys(chat["choices"][0]),
        "chat.message": _keys(chat["choices"][0]["message"]),
        "chat.finish_reason(max_tokens=4)": chat["choices"][0]["finish_reason"],
        "chat.usage": _keys(chat["usage"]),
        "completions.top": _keys(text),
        "completions.choice": _keys(text["choices"][0]),
        "completions.finish_reason(max_tokens=4)": text["choices"][0]["finish_reason"],
    }


def error_shape(port: int) -> dict[str, object]:
    cases: dict[str, dict[str, Any]] = {
        "error.too_long_prompt": {**_chat(4), "messages": [{"role": "user", "content": TOO_LONG_PROMPT}]},
        "error.max_tokens_over_context": _chat(5000),
        "error.stream_options_without_stream": _chat(4, stream_options={"include_usage": True}),
        "error.unknown_model": {**_chat(4), "model": "nope"},
        "error.bad_type": {**_chat(4), "max_tokens": "many"},
    }  # fmt: skip
    shapes: dict[str, object] = {}
    for name, payload in cases.items():
        response = post(port, "/v1/chat/completions", payload)
        shapes.update(_error_shape(name, response.status, response.body))
    return shapes


def metric_labels(text: str) -> dict[str, list[str]]:
    """{family: sorted label names} over the samples of each declared family (suffixes folded in)."""
    families = metric_types(text)
    labels: dict[str, set[str]] = {name: set() for name in families}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        sample = line.split("{", 1)[0].split(" ", 1)[0]
        # The longest declared name the sample extends: `..._accepted_tokens_per_pos_total` is not
        # a sample of `..._accepted_tokens`.
        matches = [f for f in families if sample == f or sample.startswith(f + "_")]
        if not matches:
            continue
        family = max(matches, key=len)
        if "{" in line:
            body = line.split("{", 1)[1].rsplit("}", 1)[0]
            labels[family] |= {part.split("=", 1)[0] for part in re.findall(r'(\w+)="', body)}
    return {name: sorted(found - {"le"}) for name, found in labels.items()}


def metrics_of(port: int) -> dict[str, list[str]]:
    return {name: labels for name, labels in metric_labels(get(port, "/metrics").text).items()
            if name.startswith("vllm:")}  # fmt: skip


def compare(real: Shape, twin: Shape) -> list[str]:
    """One line per aspect whose shapes differ."""
    return [f"{aspect}: real={real.get(aspect)!r} twin={twin.get(aspect)!r}"
            for aspect in sorted(set(real) | set(twin)) if real.get(aspect) != twin.get(aspect)]  # fmt: skip


def compare_metrics(real: Mapping[str, list[str]], twin: Mapping[str, list[str]]) -> list[str]:
    """Families the twin renders must exist on the real server with the same labels; the real server's
    other families are reported separately (the twin renders what the gateway reads)."""
    found = [f"metrics.{name}: missing on the real server" for name in sorted(set(twin) - set(real))]
    found += [f"metrics.{name}: labels real={real[name]} twin={twin[name]}"
              for name in sorted(set(twin) & set(real)) if real[name] != twin[name]]  # fmt: skip
    return found
