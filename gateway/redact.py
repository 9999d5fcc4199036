"""Credentials in URLs never leave the process: the one helper that strips them.

A backend URL may carry basic-auth credentials (`http://user:password@host:port`, see
deploy/gateway.example.yaml). They are sent to the engine and nowhere else: every URL shown
(`/gateway/backends`, state files, logs) goes through `without_credentials`, and any text that may quote
one (an exception's message, a traceback) through `redact`. Hosts and ports are kept: operators need them
on the admin routes and in logs. What a client sees names backends by their configured name and never
quotes a URL (gateway/proxy/upstream.py).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

# scheme://userinfo@ : the userinfo ends at the last "@" before the path, query or fragment starts.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#@]*(?:@[^\s/?#@]*)*@")


def without_credentials(url: str) -> str:
    """`url` without its `user:password@` part; any other URL unchanged."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def redact(text: str) -> str:
    """`text` with the credentials of every URL in it removed (`scheme://user:pw@host` -> `scheme://host`)."""
    return _USERINFO.sub(r"\1", text)
