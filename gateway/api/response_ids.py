"""Which backend created each stored Responses API response, so a follow-up reaches it.

A response stored by one engine (`store: true`) exists on that engine only: a request naming it in
`previous_response_id`, or a GET of `/v1/responses/{id}`, must go to the same backend. The map is
bounded (least recently used dropped first, pitfall 3) and kept in the state folder
(`response-ids.json`, written atomically) every few seconds while it changes and when the gateway
stops, so a restart or a config reload keeps conversations where they live.

The id is read from the answer itself: the `id` of the response object a whole answer is, or of the
`response.created` event that opens a stream; both come first, so only the first bytes are searched.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from pathlib import Path

import orjson

from gateway.state_files import write_atomic
from gateway.tasks import BackgroundTask

log = logging.getLogger("gateway.responses")

FILE_NAME = "response-ids.json"
MAX_IDS = 50_000  # about 3 MB on disk; a busy agent fleet keeps its recent conversations
SAVE_INTERVAL_S = 5.0
SNIFF_BYTES = 4096  # the response id comes in the first object or event of the answer
_ID = re.compile(rb'"id"\s*:\s*"((?:resp|response)[_-][A-Za-z0-9_-]{1,200})"')


def find_response_id(head: bytes) -> str | None:
    """The first response id in the first bytes of an answer, or None."""
    found = _ID.search(head[:SNIFF_BYTES])
    return found.group(1).decode() if found else None


class ResponseIds:
    """response id -> backend name, bounded, persisted in `state_dir` (None: in memory only)."""

    def __init__(self, state_dir: Path | None, max_ids: int = MAX_IDS) -> None:
        self.path = state_dir / FILE_NAME if state_dir is not None else None
        self.max_ids = max_ids
        self._ids: OrderedDict[str, str] = OrderedDict()
        self._dirty = False
        self._saver = BackgroundTask(self._save_step, "response-ids", on_error=lambda _: 30.0, logger=log)

    def __len__(self) -> int:
        return len(self._ids)

    def backend(self, response_id: str) -> str | None:
        found = self._ids.get(response_id)
        if found is not None:
            self._ids.move_to_end(response_id)
        return found

    def remember(self, response_id: str, backend: str) -> None:
        self._ids.pop(response_id, None)
        self._ids[response_id] = backend
        while len(self._ids) > self.max_ids:
            self._ids.popitem(last=False)
        self._dirty = True

    def forget(self, response_id: str) -> bool:
        found = self._ids.pop(response_id, None) is not None
        self._dirty = self._dirty or found
        return found

    def load(self) -> int:
        """Read the saved map, if any; a missing or unreadable file leaves it empty (logged)."""
        if self.path is None or not self.path.exists():
            return 0
        try:
            saved = orjson.loads(self.path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            log.warning("ignoring %s: %s", self.path, exc)
            return 0
        pairs = saved.get("ids") if isinstance(saved, dict) else None
        if isinstance(pairs, list):
            for pair in pairs[-self.max_ids :]:
                if isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair):
                    self._ids[pair[0]] = pair[1]
        return len(self._ids)

    def save(self) -> None:
        if self.path is None:
            return
        write_atomic(self.path, orjson.dumps({"version": 1, "ids": [[k, v] for k, v in self._ids.items()]}))
        self._dirty = False

    async def start(self) -> None:
        restored = self.load()
        if restored:
            log.info("restored %d response ids from %s", restored, self.path)
        if self.path is not None:
            self._saver.start()

    async def stop(self) -> None:
        await self._saver.stop()
        if self._dirty:
            self.save()

    async def _save_step(self) -> float:
        if self._dirty:
            self.save()
        return SAVE_INTERVAL_S
