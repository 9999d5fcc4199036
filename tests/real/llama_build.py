"""Build llama-server from the llama.cpp source vendored by the llama-cpp-python sdist, once per machine.

The binary is cached under ``$SPARK_GATEWAY_CACHE`` (default ``~/.cache/spark-gateway``) in a directory
named for the sdist version, the CPU's feature flags and the build's flags (the build is ``GGML_NATIVE``,
so a binary built on one CPU may not run on another). A lock file serialises concurrent builders: the
second process waits and then reuses the first one's binary.

Run directly to build (or find) the binary and print its path and the build record::

    python tests/real/llama_build.py
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
BINARY_ENV = "SPARK_GATEWAY_LLAMA_SERVER"
CACHE_ENV = "SPARK_GATEWAY_CACHE"
REQUIRED_TOOLS = ("cmake", "make", "c++", "cc")

# Only what llama-server needs: static libs (one self-contained binary to cache), no tests, examples,
# unified app, HTTPS, or web UI (the prebuilt UI would be downloaded from outside the package registries).
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
)
# On x86, a native build on a CPU with AMX compiles ggml's AMX tile kernels, and a process whose kernel
# or hypervisor has not granted it the AMX state faults on their first `ldtilecfg` (llama-server exited
# with -11 at model load on such a machine). AVX-512 serves the test model as well.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


def cmake_flags() -> tuple[str, ...]:
    """CMAKE_FLAGS, with AMX left out of the native build on x86."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return CMAKE_FLAGS
    return (*CMAKE_FLAGS, f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}")


class BuildToolsMissing(RuntimeError):
    """A compiler or cmake is not installed, so llama-server cannot be built here."""


@dataclass(frozen=True)
class BuiltServer:
    """A llama-server binary and how it came to be."""

    binary: Path
    version: str
    cold_build_seconds: float | None
    reused: bool
    lookup_seconds: float


def cache_root() -> Path:
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else Path.home() / ".cache" / "spark-gateway"


def cpu_tag() -> str:
    """A short hash of the CPU model and flags: a native build is only valid on the same CPU kind."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    wanted = sorted({ln for ln in lines if ln.startswith(("flags", "model name"))})
    # The build's flags too: a binary built with other flags is another binary.
    text = platform.machine() + "\n" + "\n".join(wanted) + "\n" + " ".join(cmake_flags())
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def install_dir(version: str = LLAMA_CPP_PYTHON_VERSION) -> Path:
    return cache_root() / f"llama-server-{version}-{cpu_tag()}"


def missing_tools() -> list[str]:
    return [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(cmd: list[str], cwd: Path, log: Path) -> None:
    """Run one build step, appending its output to the build log; raise with the log's tail on failure."""
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        result = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise RuntimeError(f"build step failed ({result.returncode}): {' '.join(cmd)}\n{tail}")


def _download_source(version: str, work: Path, log: Path) -> Path:
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps"]
    _run([*pip, f"llama-cpp-python=={version}", "-d", str(work)], work, log)
    (sdist,) = work.glob(f"llama_cpp_python-{version}.tar.gz")
    with tarfile.open(sdist) as archive:
        archive.extractall(work, filter="data")
    return work / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"


def _compile(source: Path, log: Path, jobs: int) -> Path:
    build = source / "build"
    _run(["cmake", "-S", str(source), "-B", str(build), *cmake_flags()], source, log)
    _run(["cmake", "--build", str(build), "--target", "llama-server", f"-j{jobs}"], source, log)
    return build / "bin" / "llama-server"


def _build_into(target: Path, version: str, jobs: int) -> float:
    """Download, compile and install the binary into ``target``; return the wall-clock seconds it took."""
    started = time.monotonic()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llama-build-", dir=target.parent) as tmp:
        work = Path(tmp)
        log = target.parent / f"{target.name}.build.log"
        log.write_text("")
        binary = _compile(_download_source(version, work, log), log, jobs)
        staging = work / "install"
        staging.mkdir()
        shutil.copy2(binary, staging / "llama-server")
        seconds = time.monotonic() - started
        record = {"version": version, "cold_build_seconds": round(seconds, 1), "cmake_flags": cmake_flags()}
        (staging / "build-info.json").write_text(json.dumps(record, indent=2) + "\n")
        # The rename is atomic, so a reader never sees a half-installed directory.
        staging.rename(target)
    return seconds


def _read_record(target: Path) -> float | None:
    try:
        value = json.loads((target / "build-info.json").read_text())["cold_build_seconds"]
    except (OSError, ValueError, KeyError):
        return None
    return float(value)


def ensure_llama_server(version: str = LLAMA_CPP_PYTHON_VERSION, jobs: int = 2) -> BuiltServer:
    """Return a runnable llama-server, building it only if this machine has none cached."""
    started = time.monotonic()
    override = os.environ.get(BINARY_ENV)
    if override:
        return BuiltServer(Path(override), version, None, True, time.monotonic() - started)
    target = install_dir(version)
    binary = target / "llama-server"
    if not binary.exists():
        missing = missing_tools()
        if missing:
            raise BuildToolsMissing(
                f"cannot build llama-server: missing {', '.join(missing)}"
                " (Debian: apt-get install cmake build-essential; .ci/run installs them)"
            )
        with exclusive_lock(target.parent / f"{target.name}.lock"):
            if not binary.exists():
                _build_into(target, version, jobs)
                return BuiltServer(binary, version, _read_record(target), False, time.monotonic() - started)
    return BuiltServer(binary, version, _read_record(target), True, time.monotonic() - started)


def main() -> int:
    built = ensure_llama_server()
    print(
        json.dumps(
            {
                "binary": str(built.binary),
                "version": built.version,
                "reused": built.reused,
                "cold_build_seconds": built.cold_build_seconds,
                "this_call_seconds": round(built.lookup_seconds, 3),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
