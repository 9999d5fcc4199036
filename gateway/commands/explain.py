"""`spark-gateway explain --url URL FILE`: ask a running gateway how it would route a request.

FILE holds a chat/completions request body as JSON ("-" reads stdin). The gateway answers from
POST /gateway/explain without sending anything upstream; this prints that answer as a small table.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from gateway.commands import CommandError


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("explain", help="explain a routing decision")
    parser.add_argument("--url", required=True, help="the gateway, e.g. http://127.0.0.1:8080")
    parser.add_argument("--endpoint", default=None, choices=["chat", "completions"], help="default: chat")
    parser.add_argument("--api-key", default=None, help="sent as a Bearer token if the gateway needs one")
    parser.add_argument("--json", action="store_true", help="print the raw explanation")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds")
    parser.add_argument("file", metavar="FILE", help="request body JSON, or - for stdin")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    body = read_request(args.file)
    if args.endpoint is not None:
        body["endpoint"] = args.endpoint
    status, answer = post_explain(args.url, body, args.api_key, args.timeout)
    if status != 200:
        raise CommandError(f"the gateway answered {status}: {_error_message(answer)}")
    print(json.dumps(answer, indent=2) if args.json else render(answer))
    return 0


def read_request(file: str) -> dict[str, Any]:
    """The request body in FILE ("-": stdin); CommandError (exit 2) unless it holds a JSON object. A file
    that cannot be read raises OSError, which the command line reports as one line too."""
    try:
        body = json.loads(sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise CommandError(f"{file}: not UTF-8 text", 2) from exc
    except json.JSONDecodeError as exc:
        raise CommandError(f"{file}: not JSON: {exc}", 2) from exc
    if not isinstance(body, dict):
        raise CommandError(f"{file}: a request body is a JSON object", 2)
    return body


def post_explain(url: str, body: dict[str, Any], api_key: str | None, timeout: float) -> tuple[int, Any]:
    """(status, decoded answer) from URL's /gateway/explain; CommandError if the gateway is out of reach."""
    headers = {"content-type": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    data = json.dumps(body).encode()
    request = urllib.request.Request(_explain_url(url), data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, _decode(response.read())
    except urllib.error.HTTPError as exc:  # a 4xx/5xx still carries a JSON error body
        return exc.code, _decode(exc.read())
    except (urllib.error.URLError, OSError) as exc:  # refused, unknown host, timed out
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise CommandError(f"cannot reach {url}: {reason}") from exc


def _explain_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CommandError(f"--url {url!r} is not an http(s) URL, e.g. http://127.0.0.1:8080", 2)
    target = url.rstrip("/")
    return target if target.endswith("/gateway/explain") else target + "/gateway/explain"


def _decode(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except ValueError:  # not JSON (or not UTF-8): whatever answered is not a spark-gateway
        return payload.decode(errors="replace")


def _error_message(answer: Any) -> str:
    error = answer.get("error") if isinstance(answer, dict) else None
    if not isinstance(error, dict):
        return " ".join(str(answer).split())[:300]  # one line, whatever the body was
    message = str(error.get("message"))
    if error.get("code") == "unknown_url":
        message += " (a gateway serves /gateway/explain only when it runs a policy)"
    return message


def render(e: dict[str, Any]) -> str:
    """The explanation as a few labelled lines and a table of candidates."""
    f, p, policy = e["features"], e["profile"], e["policy"]
    lines = [
        f"policy    {policy['source']} (sha256 {policy['sha256'][:12]})",
        "request   " + " ".join(f"{k}={_show(v)}" for k, v in f.items()),
        f"profile   {p['name']} ({p['routing']}, objective {p['objective']}): {p['why']}",
    ]
    lines += [f"          skipped {s['profile']}: {s['because']}" for s in p["skipped"]]
    weights = " ".join(f"{k}={v:g}" for k, v in e["scoring"]["weights"].items())
    lines.append(f"scoring   {e['scoring']['note']}; weights {weights}")
    if policy.get("last_reload_error"):
        lines.append(f"warning   last policy reload failed: {policy['last_reload_error']}")
    lines += ["", *_table(e["candidates"], list(e["scoring"]["weights"])), ""]
    adaptive = e["scoring"].get("adaptive")
    if adaptive:
        lines += [*_predictions(adaptive), ""]
    if e["chosen"]:
        failover = ", ".join(e["ranked"][1:]) or "none"
        lines.append(f"chosen    {e['chosen']} (failover: {failover})")
    if e.get("spill"):
        lines.append(f"spill     {e['spill']}")
    outcome = e.get("outcome")
    if e["refusal"]:
        r = e["refusal"]
        # With an outcome, the router's refusal is only its first word: the request may still wait.
        label = "routing  " if outcome and outcome["action"] != "refuse" else "refusal  "
        lines.append(f"{label} {r['status']} {r['code']}: {r['message']}")
    if outcome:
        lines += _outcome(outcome)
    return "\n".join(lines)


def _outcome(o: dict[str, Any]) -> list[str]:
    lines = [f"outcome   {o['summary']}"]
    r = o.get("refusal")
    if o["action"] == "wait" and r:
        retry = f" (Retry-After {r['retry_after']} s)" if r.get("retry_after") is not None else ""
        lines.append(f"          then {r['status']} {r['code']}{retry}: {r['message']}")
    return lines


def _predictions(adaptive: dict[str, Any]) -> list[str]:
    """Adaptive routing's terms per backend: what each is predicted to take for this request, on how many
    samples, the harm it does to its device's neighbours, the prior, and the score they make."""
    lines = [f"adaptive  {adaptive['why']}"]
    if adaptive.get("exploration"):
        lines.append(f"explore   {adaptive['exploration']}")
    value = adaptive["objective"].upper()
    header = ["BACKEND", "SAMPLES", "TTFT S", "TPOT S", "HARM S", value, "PRIOR", "SCORE"]
    rows = [
        [
            p["backend"],
            str(p["samples"]),
            *(_figure(p[k]) for k in ("ttft_s", "tpot_s", "harm_s", "effective_value", "prior", "score")),
            p["why"],
        ]
        for p in adaptive["predictions"]
    ]
    return lines + _aligned([[*header, "WHY"], *rows])


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _table(candidates: list[dict[str, Any]], scorers: list[str]) -> list[str]:
    header = ["BACKEND", "ELIGIBLE", "SCORE", *(s.upper() for s in scorers), "REASON"]
    rows = [
        [
            c["backend"],
            "yes" if c["eligible"] else "no",
            "-" if c["score"] is None else f"{c['score']:.3f}",
            *(f"{c['scores'][s]:.3f}" if s in c["scores"] else "-" for s in scorers),
            c["reason"],
        ]
        for c in candidates
    ]
    return _aligned([header, *rows])


def _aligned(rows: list[list[str]]) -> list[str]:
    """Rows as columns padded to their widest cell, the last column left ragged."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    padded = [[*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]] for row in rows]
    return ["  ".join(row) for row in padded]


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return str(value)
