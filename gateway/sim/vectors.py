"""Deterministic embeddings and rerank scores: the same text always gives the same unit vector (from
its hash), so clients can check shapes, ordering and caching without a model."""

from __future__ import annotations

import hashlib
import math
import random

from gateway.sim.tokens import pieces

EMBEDDING_DIM = 1024


def embedding(text: str, dim: int = EMBEDDING_DIM) -> list[float]:
    rng = random.Random(hashlib.sha256(text.encode()).digest())
    values = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def relevance(query: str, document: str) -> float:
    """Word overlap of query and document in (0, 1), with a small hash-derived tie-breaker."""
    query_words = {p.strip().lower() for p in pieces(query) if p.strip()}
    document_words = {p.strip().lower() for p in pieces(document) if p.strip()}
    overlap = len(query_words & document_words) / max(1, len(query_words))
    jitter = hashlib.sha256(f"{query}\x00{document}".encode()).digest()[0] / 255 * 0.01
    return round(0.98 * overlap + jitter, 6)
