"""`spark-gateway bench overhead --json` prints one result per concurrency level (short run)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_overhead_json_has_one_result_per_level() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway",
            "bench",
            "overhead",
            "--json",
            "--concurrency",
            "1,4",
            "--seconds",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["results"]
    assert [r["concurrency"] for r in results] == [1, 4]
    for result in results:
        assert set(result) == {"concurrency", "added_ttft_p50_ms", "added_ttft_p99_ms", "throughput_ratio"}
        assert 0.5 < result["throughput_ratio"] < 1.5


def test_overhead_with_a_page_client_reads_the_status_page_while_it_measures() -> None:
    command = [sys.executable, "-m", "gateway", "bench", "overhead", "--concurrency", "2", "--seconds", "2.5"]
    done = subprocess.run([*command, "--page-client"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-2]
    assert last.startswith("page client: ") and last.endswith("reads, every 2 s"), last
    rounds = int(last.split()[2])
    assert rounds >= 1, last  # every read answered 200, or the run would have failed
