"""What one request looks like to the classifier, the filters and the scorers, computed once at ingress."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Features:
    """What the classifier and filters know about one request, computed once at ingress."""

    model: str
    endpoint: str  # "chat" | "completions"
    prompt_tokens: int  # estimated
    max_output_tokens: int | None  # max_tokens / max_completion_tokens as sent (None if absent)
    modalities: frozenset[str] = frozenset({"text"})  # subset of {"text","image","video","audio"}
    tools: bool = False
    response_format: str | None = None  # "json_object", "json_schema", ... or None
    stream: bool = False
    temperature: float | None = None
    n: int = 1
    pool_inflight: int = 0  # live concurrency of the model pool at decision time (this request excluded)
    # Share (0..1) of the prompt's word 4-grams that occur more than once (gateway/repetition.py): high for
    # edits, code and quoted tool results, where speculative drafts are mostly accepted; ~0 for novel prose.
    repetition: float = 0.0
