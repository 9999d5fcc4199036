"""Where a config file's live-measurement state lives when the file does not say."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

APP_DIR = "spark-gateway"
# Enough of the config path's hash that two configs of the same name never share a state folder.
_PATH_HASH_CHARS = 12


def default_state_dir(config: Path) -> Path:
    """A config file's own state folder: <user cache>/spark-gateway/<file stem>-<hash of its path>.

    One folder per config file, so two gateways (or a gateway and a test or a bench) never read each
    other's measurements; in the user cache rather than beside the file, because config folders are
    often read-only (/etc, a bind mount) or a source checkout. The path is made absolute but symlinks are
    kept: a config mounted through a symlink swapped on update keeps its folder.
    """
    absolute = os.path.normpath(Path(config).absolute())
    digest = hashlib.sha256(absolute.encode()).hexdigest()[:_PATH_HASH_CHARS]
    cache = _user_cache()
    if cache is None:  # no usable home: beside the file is the only place left
        return Path(config).parent / f"{Path(config).stem}.state"
    return cache / APP_DIR / f"{Path(config).stem}-{digest}"


def _user_cache() -> Path | None:
    """$XDG_CACHE_HOME, else ~/.cache; None when there is no home directory."""
    cache = os.environ.get("XDG_CACHE_HOME")
    if cache:
        return Path(cache)
    try:
        return Path.home() / ".cache"
    except RuntimeError:
        return None
