"""Import every module of the installed `gateway` package; exit 1 if one fails.

Run with the python of a plain `pip install .` (no extras): it proves the runtime code imports only the
declared runtime dependencies. The one allowed exception is a benchmark's own tool module
(gateway/bench/_*.py), which may fail only for want of a package of the `bench` extra.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import re
import sys

import gateway


def bench_extra() -> set[str]:
    """Distribution names of the `bench` extra, read from the installed metadata."""
    requires = importlib.metadata.requires("spark-gateway") or []
    names: set[str] = set()
    for requirement in requires:
        if re.search(r"""extra\s*==\s*["']bench["']""", requirement):
            match = re.match(r"[A-Za-z0-9._-]+", requirement)
            if match:
                names.add(match.group(0).lower())
    return names


def is_bench_tool(name: str) -> bool:
    return name.startswith("gateway.bench._")


def main() -> int:
    if not gateway.__file__ or not gateway.__file__.startswith(sys.prefix):
        print(f"gateway is imported from {gateway.__file__}, not from this install", file=sys.stderr)
        return 1
    allowed = bench_extra()
    failures: list[str] = []
    bench_only: list[str] = []
    names = [info.name for info in pkgutil.walk_packages(gateway.__path__, "gateway.")]
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if is_bench_tool(name) and (exc.name or "").lower() in allowed:
                bench_only.append(f"{name} (needs {exc.name})")
            else:
                failures.append(f"{name}: {exc!r}")
        except Exception as exc:  # any import-time failure is a broken install
            failures.append(f"{name}: {exc!r}")
    imported = len(names) - len(failures) - len(bench_only)
    print(f"imported {imported} of {len(names)} gateway modules; bench extra only: {', '.join(bench_only)}")
    if failures:
        print("modules that do not import:", *failures, sep="\n  ", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
