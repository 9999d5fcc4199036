"""What a plain `pip install .` gives: the gateway's code imports only its declared runtime dependencies.

Statically, every import in gateway/ must resolve to the standard library, the gateway itself, or a
distribution in the runtime dependency closure of pyproject.toml (extras of dependencies followed,
markers evaluated); a benchmark's own tool module (gateway/bench/_*.py) may also use the `bench` extra.
Dynamically, a fresh interpreter in which every other installed package is made unimportable starts the
command line, imports every module, and gets one clear line from a benchmark whose tool is missing.
.ci/smoke_installed.sh does the same in a real clean venv.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "gateway"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def _wanted(marker: Marker | None, extras: frozenset[str]) -> bool:
    if marker is None:
        return True
    return any(marker.evaluate({"extra": extra}) for extra in extras or {""})


def _closure(requirements: list[str]) -> set[str]:
    """Canonical names of these requirements' distributions and of everything they require, as installed."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(Requirement(line), frozenset[str]()) for line in requirements]
    names: set[str] = set()
    while todo:
        requirement, parent_extras = todo.pop()
        name = canonicalize_name(requirement.name)
        key = (name, frozenset(requirement.extras))
        if key in seen or not _wanted(requirement.marker, parent_extras):
            continue
        seen.add(key)
        names.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # not on this platform (a marker the installer evaluated differently)
        todo.extend((Requirement(line), key[1]) for line in requires)
    return names


def runtime_distributions() -> set[str]:
    return _closure(PYPROJECT["project"]["dependencies"])


def bench_distributions() -> set[str]:
    return runtime_distributions() | _closure(PYPROJECT["project"]["optional-dependencies"]["bench"])


def _import_providers() -> dict[str, set[str]]:
    """Top-level import name -> canonical names of the installed distributions providing it."""
    mapping = importlib.metadata.packages_distributions()
    return {module: {canonicalize_name(d) for d in dists} for module, dists in mapping.items()}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> Iterator[str]:
    """Top-level names of absolute imports in `node` and below, skipping `if TYPE_CHECKING:` blocks."""
    if isinstance(node, ast.If) and _is_type_checking(node):
        for stmt in node.orelse:
            yield from _imports(stmt)
        return
    if isinstance(node, ast.Import):
        yield from (alias.name.split(".")[0] for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        yield node.module.split(".")[0]
    for child in ast.iter_child_nodes(node):
        yield from _imports(child)


def _third_party_imports(path: Path) -> set[str]:
    names = set(_imports(ast.parse(path.read_text(), str(path))))
    return {n for n in names if n not in sys.stdlib_module_names and n != "gateway"}


def _is_bench_tool(path: Path) -> bool:
    return path.parent == PACKAGE / "bench" and path.name.startswith("_") and path.name != "__init__.py"


def test_the_closure_follows_extras_and_leaves_test_tools_out() -> None:
    runtime = runtime_distributions()
    # uvicorn[standard] brings uvloop and httptools; pydantic brings pydantic-core.
    assert {"uvicorn", "uvloop", "httptools", "pydantic", "pydantic-core"} <= runtime
    assert not {"httpx", "openai", "pytest", "jsonschema", "schemathesis"} & runtime
    assert "httpx" in bench_distributions()


def test_the_import_scan_sees_nested_imports_and_skips_type_checking_blocks(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import os\nfrom typing import TYPE_CHECKING\nimport aiohttp.web\n"
        "if TYPE_CHECKING:\n    import openai\nelse:\n    import yaml\n"
        "def f():\n    from httpx import Client\n    from . import sibling\n"
    )
    assert _third_party_imports(module) == {"aiohttp", "yaml", "httpx"}


def test_gateway_code_imports_only_runtime_dependencies() -> None:
    providers = _import_providers()
    runtime, bench = runtime_distributions(), bench_distributions()
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        allowed = bench if _is_bench_tool(path) else runtime
        for name in sorted(_third_party_imports(path)):
            if not providers.get(name, set()) & allowed:
                wrong.append(f"{path.relative_to(REPO)}: {name} (from {sorted(providers.get(name, []))})")
    assert not wrong, "imports outside the declared runtime dependencies:\n" + "\n".join(wrong)


def test_the_bench_tool_module_is_the_only_one_that_needs_the_bench_extra() -> None:
    tools = [p.name for p in (PACKAGE / "bench").glob("_*.py") if p.name != "__init__.py"]
    assert tools == ["_httpx_transport.py"]
    assert _third_party_imports(PACKAGE / "bench" / "_httpx_transport.py") >= {"httpx"}


# ---------------------------------------------------------------- a fresh interpreter without the extras

# Runs in a subprocess: a meta-path finder refuses every top-level module that only non-runtime
# distributions provide, as on a plain install; then the checks report as one JSON line.
PROBE = r"""
import contextlib, importlib, importlib.abc, io, json, pkgutil, sys

BLOCKED = set(json.loads(sys.argv[1]))

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker())

import gateway
from gateway.cli import main

def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        except Exception as exc:  # reported, so the test that reads it fails with the reason
            code = f"{type(exc).__name__}: {exc}"
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}

failed = {}
for info in pkgutil.walk_packages(gateway.__path__, "gateway."):
    try:
        importlib.import_module(info.name)
    except Exception as exc:
        failed[info.name] = f"{type(exc).__name__}: {exc}"

report = {
    "failed": failed,
    "help": {" ".join(a): run(a) for a in (["--help"], ["bench", "--help"], ["serve", "--help"])},
    "transport": run(["bench", "transport", "--seconds", "0.1"]),
    "overhead": run(["bench", "overhead", "--transport", "httpx", "--seconds", "0.1"]),
}
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def without_extras() -> dict[str, Any]:
    providers = _import_providers()
    runtime = runtime_distributions()
    blocked = sorted(
        name
        for name, dists in providers.items()
        if not dists & runtime and name not in sys.stdlib_module_names and name != "gateway"
    )
    assert {"httpx", "openai", "pytest", "jsonschema"} <= set(blocked)
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(blocked)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return report


def test_every_module_but_the_bench_tool_imports_without_the_extras(without_extras: dict[str, Any]) -> None:
    assert without_extras["failed"] == {
        "gateway.bench._httpx_transport": "ModuleNotFoundError: No module named 'httpx'"
    }


def test_the_command_line_starts_without_the_extras(without_extras: dict[str, Any]) -> None:
    for argv, run in without_extras["help"].items():
        assert run["code"] == 0, (argv, run["code"], run["stderr"])
        assert run["stdout"].startswith("usage: spark-gateway"), argv
    assert "transport" in without_extras["help"]["bench --help"]["stdout"]


@pytest.mark.parametrize("kind", ["transport", "overhead"])
def test_a_benchmark_without_its_tool_says_which_extra_in_one_line(
    without_extras: dict[str, Any], kind: str
) -> None:
    run = without_extras[kind]
    assert run["code"] == 2
    assert run["stdout"] == ""
    lines = run["stderr"].splitlines()
    assert len(lines) == 1 and "needs httpx" in lines[0] and "spark-gateway[bench]" in lines[0], lines
