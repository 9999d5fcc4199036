"""Record one answer of a real llama-server twice: its own /v1/messages stream and its
/v1/chat/completions stream for the same greedy request, as the SSE fixtures the translation tests read.

Run against a running llama-server (tests/real builds one; any model will do, the tests compare structure)::

    python tests/translate/capture_real_llamacpp.py http://127.0.0.1:8080

The captured bytes are written unchanged, so the fixtures are the engine's exact wire format.
"""

from __future__ import annotations

import http.client
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

FIXTURES = Path(__file__).parent / "fixtures"
MESSAGES_FIXTURE = "real-llamacpp-messages-text.sse"
CHAT_FIXTURE = "real-llamacpp-chat-text.sse"

# Greedy and short: the same engine answers both requests with the same tokens.
MESSAGES_REQUEST: dict[str, Any] = {
    "model": "gemma",
    "max_tokens": 16,
    "temperature": 0,
    "system": "You answer in one short sentence.",
    "messages": [{"role": "user", "content": "Name one colour of the sky."}],
}


def post_stream(url: str, path: str, body: dict[str, Any], timeout_s: float = 60.0) -> bytes:
    """POST `body` and return the whole streamed answer's bytes; a non-200 is an error."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout_s)
    try:
        conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{path} answered {response.status}: {data[:500]!r}")
        return data
    finally:
        conn.close()


def capture(url: str, chat_request: dict[str, Any]) -> tuple[bytes, bytes]:
    """(Messages stream, chat stream) for MESSAGES_REQUEST and its chat translation `chat_request`."""
    messages = post_stream(url, "/v1/messages", {**MESSAGES_REQUEST, "stream": True})
    chat = post_stream(url, "/v1/chat/completions", chat_request)
    return messages, chat


def main(argv: list[str]) -> int:
    # The chat side is exactly what the gateway would send for the Messages request.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from gateway.translate import messages_to_chat

    chat_request = messages_to_chat({**MESSAGES_REQUEST, "stream": True})
    messages, chat = capture(argv[1], chat_request)
    (FIXTURES / MESSAGES_FIXTURE).write_bytes(messages)
    (FIXTURES / CHAT_FIXTURE).write_bytes(chat)
    print(f"wrote {MESSAGES_FIXTURE} ({len(messages)} bytes), {CHAT_FIXTURE} ({len(chat)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
