"""The layering contract (pyproject.toml [tool.importlinter], docs/ARCHITECTURE.md "Layers") can fail.

Each test copies the package and pyproject.toml into a temporary folder, adds one forbidden import to the
copy and runs the real `lint-imports` there (a subprocess, so the copy, not the `gateway` this test
process has imported, is the one analysed). The report must name the added import under the contract it
breaks; the same run over the untouched copy must not.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAYERS = "Layers (docs/ARCHITECTURE.md): a module imports only its own layer or below"
TWIN = "The twin (gateway.sim) imports nothing of the gateway runtime"
JOINED = "Only the CLI layer joins the twin to the gateway"
DECIDING = "Routing and policy decide on plain data: no proxy, api, stats or backends"


def _lint_imports() -> str:
    beside_python = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    found = beside_python or shutil.which("lint-imports")
    assert found is not None, "lint-imports is missing: it comes with the test extra (import-linter)"
    return found


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(REPO / "gateway", root / "gateway", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def _run(root: Path) -> tuple[int, str]:
    done = subprocess.run(
        [_lint_imports(), "--no-cache", "--config", "pyproject.toml"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stdout + done.stderr


def _broken_section(report: str, contract: str) -> str:
    """The part of the report that explains why `contract` is broken ("" when it is not)."""
    _, _, details = report.partition("Broken contracts")
    _, found, rest = details.partition(f"\n{contract}\n")
    if not found:
        return ""
    others = [rest.find(f"\n{name}\n") for name in (LAYERS, TWIN, JOINED, DECIDING) if name != contract]
    ends = [at for at in others if at >= 0]
    return rest[: min(ends)] if ends else rest


def _add_import(module: Path, line: str) -> None:
    module.write_text(module.read_text() + f"\n{line}\n")


@pytest.fixture(scope="module")
def untouched(tmp_path_factory: pytest.TempPathFactory) -> str:
    _, report = _run(_copy(tmp_path_factory.mktemp("untouched")))
    assert f"{LAYERS} " in report, report  # the contract was read and checked
    return report


def test_an_upward_import_from_routing_into_api_breaks_the_layers(tmp_path: Path, untouched: str) -> None:
    root = _copy(tmp_path)
    _add_import(root / "gateway" / "routing" / "__init__.py", "from gateway.api import errors  # noqa")
    code, report = _run(root)
    chain = "gateway.routing -> gateway.api.errors"
    assert chain not in untouched
    assert code != 0
    assert f"{LAYERS} BROKEN" in report
    assert "gateway.routing is not allowed to import gateway.api:" in _broken_section(report, LAYERS)
    assert chain in _broken_section(report, LAYERS)
    assert chain in _broken_section(report, DECIDING)


def test_the_twin_importing_the_runtime_breaks_its_contract(tmp_path: Path, untouched: str) -> None:
    root = _copy(tmp_path)
    _add_import(root / "gateway" / "sim" / "__init__.py", "from gateway.settings import Settings  # noqa")
    code, report = _run(root)
    assert f"{TWIN} KEPT" in untouched
    assert code != 0 and f"{TWIN} BROKEN" in report
    assert "gateway.sim -> gateway.settings" in _broken_section(report, TWIN)


def test_the_runtime_importing_the_twin_breaks_the_cli_only_contract(tmp_path: Path, untouched: str) -> None:
    root = _copy(tmp_path)
    _add_import(root / "gateway" / "app.py", "from gateway.sim import clock  # noqa")
    code, report = _run(root)
    assert f"{JOINED} KEPT" in untouched
    assert code != 0 and f"{JOINED} BROKEN" in report
    assert "gateway.app -> gateway.sim.clock" in _broken_section(report, JOINED)


def test_a_new_top_level_module_must_take_a_layer(tmp_path: Path, untouched: str) -> None:
    root = _copy(tmp_path)
    (root / "gateway" / "newcomer.py").write_text("VALUE = 1\n")
    code, report = _run(root)
    assert "gateway.newcomer" not in untouched
    assert code != 0 and f"{LAYERS} BROKEN" in report
    section = _broken_section(report, LAYERS)
    assert "not listed as layers" in section and "- gateway.newcomer" in section
