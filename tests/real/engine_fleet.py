"""The pair of real llama-server instances the suite runs: same model, one plain, one speculative."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from llama_build import BuiltServer
from llama_process import LlamaServer, start, stop

CONTEXT_SIZE = 2048
# One slot and one thread each, so the two instances share the two cores without oversubscribing them.
COMMON_ARGS = (
    "--ctx-size",
    str(CONTEXT_SIZE),
    "--parallel",
    "1",
    "--threads",
    "1",
    "--threads-batch",
    "1",
    "--metrics",
)
# Prompt-lookup drafting: look up the last 3 tokens earlier in the context and propose the 8 that followed.
# The defaults (12 and 48) almost never fire on the short prompts this suite can afford.
SPECULATIVE_ARGS = (
    "--spec-type",
    "ngram-simple",
    "--spec-ngram-simple-size-n",
    "3",
    "--spec-ngram-simple-size-m",
    "8",
)


@dataclass(frozen=True)
class EnginePair:
    plain: LlamaServer
    speculative: LlamaServer
    model_path: Path
    build: BuiltServer


@contextmanager
def running_pair(build: BuiltServer, model: Path, log_dir: Path) -> Iterator[EnginePair]:
    """Start both servers one after the other and stop every one that started, whatever happens."""
    base = ["--model", str(model), *COMMON_ARGS]
    started: list[LlamaServer] = []
    try:
        started.append(start("plain", build.binary, base, log_dir))
        started.append(start("speculative", build.binary, [*base, *SPECULATIVE_ARGS], log_dir))
        yield EnginePair(started[0], started[1], model, build)
    finally:
        for server in started:
            stop(server)
