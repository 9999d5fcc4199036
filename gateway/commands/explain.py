"""`spark-gateway explain --url URL FILE`: ask a running gateway how it would route a request.

FILE holds a chat/completions request body as JSON ("-" reads stdin). The gateway answers from
POST /gateway/explain without sending anything upstream; this prints that answer as a small table.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


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
    text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        print(f"{args.file}: not JSON: {exc}", file=sys.stderr)
        return 1
    if args.endpoint is not None:
        body["endpoint"] = args.endpoint
    try:
        status, answer = post_explain(args.url, body, args.api_key, args.timeout)
    except (urllib.error.URLError, OSError) as exc:
        print(f"cannot reach {args.url}: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"gateway answered {status}: {json.dumps(answer)}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2) if args.json else render(answer))
    return 0


def post_explain(url: str, body: dict[str, Any], api_key: str | None, timeout: float) -> tuple[int, Any]:
    target = url.rstrip("/")
    if not target.endswith("/gateway/explain"):
        target += "/gateway/explain"
    headers = {"content-type": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(target, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:  # a 4xx/5xx still carries a JSON error body
        payload = exc.read()
        try:
            return exc.code, json.loads(payload)
        except json.JSONDecodeError:
            return exc.code, payload.decode(errors="replace")


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
    if e["chosen"]:
        failover = ", ".join(e["ranked"][1:]) or "none"
        lines.append(f"chosen    {e['chosen']} (failover: {failover})")
    if e["refusal"]:
        r = e["refusal"]
        lines.append(f"refusal   {r['status']} {r['code']}: {r['message']}")
    return "\n".join(lines)


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
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    return [
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]])
        for row in [header, *rows]
    ]


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return str(value)
