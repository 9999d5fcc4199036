"""Measure the real pair direct and through the gateway, and hold an external client against the gateway.

    python tests/real/external_bench.py [--requests N] [--json]

Starts the two real llama-server instances and the gateway in front of them, then
1. `spark-gateway bench scenarios --url ... --scenario tg-c1` against each instance directly and through
   its gateway pool, with the speculative counters' movement over each run;
2. llama-benchy (PyPI) against the gateway's plain pool, compared with the gateway's own /metrics deltas.

llama-benchy runs offline here: it lives in its own venv under $SPARK_GATEWAY_CACHE (its transformers,
numpy and an `asyncio` backport stay out of the project's venv), its tokenizer is the model's own,
rebuilt from the GGUF's vocabulary into a tokenizer.json, and its "book" is the repository's docs served
from 127.0.0.1. Too slow and heavy for every CI run, so docs/real-engines.md records its figures.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import subprocess
import sys
import tempfile
import threading
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from client_vs_gateway import gateway_figures
from engine_fleet import running_pair
from engine_http import get, parse_metrics
from gateway_harness import (
    PLAIN,
    PLAIN_POOL,
    SPEC_POOL,
    metric_samples,
    pair_settings,
    serving,
    wait_until_ready,
)
from gguf_model import ensure_gemma_gguf
from llama_build import cache_root, ensure_llama_server
from llama_process import LlamaServer

REPO = Path(__file__).resolve().parents[2]
BENCHY = "llama-benchy==0.4.0"
BENCH_TIMEOUT_S = 900
SPEC_KEYS = ("llamacpp:spec_decode_num_draft_tokens_total", "llamacpp:spec_decode_num_accepted_tokens_total")

# Run inside the llama-benchy venv: the GGUF's vocabulary -> tokenizer.json, with transformers' own
# GGUF-to-Gemma tokenizer builder (which needs no torch, unlike AutoTokenizer's gguf_file path).
TOKENIZER_SCRIPT = """
import sys, gguf
from transformers.integrations.gguf.gguf_tokenizer_mapping import gemma_tokenizer
reader = gguf.GGUFReader(sys.argv[1])
field = lambda key: reader.fields["tokenizer.ggml." + key].contents()
vocab = {"tokens": field("tokens"), "scores": field("scores"), "token_type": field("token_type"),
         "bos_token_id": field("bos_token_id"), "eos_token_id": field("eos_token_id"),
         "unk_token_id": field("unknown_token_id"), "pad_token_id": field("padding_token_id")}
gemma_tokenizer(vocab).backend_tokenizer.save(sys.argv[2])
"""


def benchy_venv() -> Path:
    """The venv's python, created and filled once (pip from PyPI); later runs reuse it."""
    root = cache_root() / "llama-benchy-venv"
    python = root / "bin" / "python"
    if not (root / "bin" / "llama-benchy").exists():
        venv.create(root, with_pip=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", BENCHY, "gguf"], check=True)
    return python


def gemma_tokenizer_json(python: Path, gguf_path: Path) -> Path:
    out = cache_root() / "models" / "gemma-3-270m-tokenizer.json"
    if not out.exists():
        subprocess.run([str(python), "-c", TOKENIZER_SCRIPT, str(gguf_path), str(out)], check=True)
    return out


@contextmanager
def served_corpus(directory: Path) -> Iterator[str]:
    """The repository's docs as one text file on 127.0.0.1: llama-benchy cuts its prompts from it."""
    corpus = directory / "corpus.txt"
    corpus.write_text("\n\n".join(p.read_text() for p in sorted((REPO / "docs").glob("*.md"))))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/corpus.txt"
    finally:
        server.shutdown()
        server.server_close()


def spec_counters(server: LlamaServer) -> tuple[float, float]:
    samples = parse_metrics(get(server.port, "/metrics").text)
    return samples[SPEC_KEYS[0]], samples[SPEC_KEYS[1]]


def scenario(url: str, model: str, requests: int) -> dict[str, Any]:
    cmd = [
        "spark-gateway",
        "bench",
        "scenarios",
        "--url",
        url,
        "--model",
        model,
        "--scenario",
        "tg-c1",
        "--requests",
        str(requests),
        "--json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S, check=True)
    result: dict[str, Any] = json.loads(done.stdout)["results"][0]
    return result


def run_scenarios(
    plain: LlamaServer, spec: LlamaServer, gateway_url: str, requests: int
) -> list[dict[str, Any]]:
    """Per instance: a cold run (fills llama-server's prompt cache with the bench's fixed prompts), then a
    direct and a through-the-gateway run that both find the same cache, so they differ only by the path."""
    rows = []
    for server, pool in ((plain, PLAIN_POOL), (spec, SPEC_POOL)):
        for label, url, model in (
            (f"{server.name} direct, cold", server.base_url, "gemma"),
            (f"{server.name} direct", server.base_url, "gemma"),
            (f"{server.name} via gateway", gateway_url, pool),
        ):
            before = spec_counters(server)
            result = scenario(url, model, requests)
            after = spec_counters(server)
            moved = {"drafted": after[0] - before[0], "accepted": after[1] - before[1]}
            rows.append({"run": label, **result, **moved})
    return rows


def run_benchy(
    python: Path, tokenizer: Path, corpus_url: str, gateway_url: str, out: Path, runs: int
) -> dict[str, Any]:
    cmd = [
        str(python.parent / "llama-benchy"),
        "--base-url",
        gateway_url + "/v1",
        "--model",
        PLAIN_POOL,
        "--tokenizer",
        str(tokenizer),
        "--book-url",
        corpus_url,
        "--pp",
        "128",
        "--tg",
        "32",
        "--runs",
        str(runs),
        "--latency-mode",
        "none",
        "--format",
        "json",
        "--save-result",
        str(out),
        # Only the measured requests: no warm-up, prompt adaptation or coherence requests.
        "--no-warmup",
        "--no-adapt-prompt",
        "--skip-coherence",
    ]
    env = {"HOME": str(out.parent), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    subprocess.run(cmd, check=True, timeout=BENCH_TIMEOUT_S, env=env, stdout=sys.stderr)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=4, help="requests per scenario run and benchy runs")
    args = parser.parse_args()
    build, model = ensure_llama_server(), ensure_gemma_gguf()
    python = benchy_venv()
    tokenizer = gemma_tokenizer_json(python, model)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "logs").mkdir()
        policy = tmp / "policy.yaml"
        policy.write_text("version: 1\nrouting: static\nprofiles:\n  - name: default\n")
        with (
            running_pair(build, model, tmp / "logs") as pair,
            serving(pair_settings(pair.plain.base_url, pair.speculative.base_url, policy)) as gw,
        ):
            wait_until_ready(gw)
            rows = run_scenarios(pair.plain, pair.speculative, gw.url, args.requests)
            with served_corpus(tmp) as corpus_url:
                before = metric_samples(gw.port)
                benchy = run_benchy(python, tokenizer, corpus_url, gw.url, tmp / "benchy.json", args.requests)
                recorded = gateway_figures(before, metric_samples(gw.port), PLAIN)
    decode = 1 / recorded.mean_itl_s if recorded.mean_itl_s else None
    report = {
        "scenarios": rows,
        "llama_benchy": benchy,
        "gateway": recorded.__dict__,
        "gateway_decode_tok_s": decode,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
