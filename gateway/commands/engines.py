"""`spark-gateway engines list|start|stop [NAME] --url URL`: a running gateway's engine containers.

Talks to GET /gateway/engines and POST /gateway/engines/NAME/start|stop (the admin key, when the gateway
has one, goes in --api-key).
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from gateway.commands import CommandError

COLUMNS = ("name", "model", "phase", "status", "device", "memory_gib", "inflight", "demand_per_min")


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "engines", help="list, start or stop a running gateway's engine containers"
    )
    parser.add_argument("action", choices=["list", "start", "stop"])
    parser.add_argument("name", nargs="?", help="the engine (start and stop)")
    parser.add_argument("--url", required=True, help="the gateway, e.g. http://127.0.0.1:8080")
    parser.add_argument("--api-key", default=None, help="the admin key, if the gateway has one")
    parser.add_argument("--json", action="store_true", help="print the gateway's answer as JSON")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds (a stop drains first)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    base = _base_url(args.url)
    if args.action == "list":
        status, answer = call(base + "/gateway/engines", "GET", args.api_key, args.timeout)
    else:
        if not args.name:
            raise CommandError(f"engines {args.action} needs the engine's name", 2)
        path = f"/gateway/engines/{urllib.parse.quote(args.name, safe='')}/{args.action}"
        status, answer = call(base + path, "POST", args.api_key, args.timeout)
    if status not in (200, 409):
        message = (answer.get("error") or {}).get("message") if isinstance(answer, dict) else answer
        raise CommandError(f"the gateway answered {status}: {message}")
    if args.json:
        print(json.dumps(answer, indent=2))
    elif args.action == "list":
        print(render(answer.get("engines", []), answer.get("devices", {})))
    else:
        print(render([answer["engine"]], {}))
    return 0 if status == 200 else 1


def call(url: str, method: str, api_key: str | None, timeout: float) -> tuple[int, Any]:
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    request = urllib.request.Request(
        url, data=b"" if method == "POST" else None, headers=headers, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw)
        except ValueError:
            return exc.code, raw.decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise CommandError(f"cannot reach {url}: {reason}") from exc


def render(engines: list[dict[str, Any]], devices: dict[str, Any]) -> str:
    rows = [COLUMNS, *(tuple(_cell(e.get(c)) for c in COLUMNS) for e in engines)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    for name, device in devices.items():
        lines.append(f"device {name}: {device['resident_gib']:g} of {device['memory_gib']:g} GiB resident")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _base_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CommandError(f"--url {url!r} is not an http(s) URL, e.g. http://127.0.0.1:8080", 2)
    return url.rstrip("/")
