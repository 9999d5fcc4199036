"""The README's two commands are the ones users run and CI proves: the run command installs no extra, the
test command installs the `test` extra, and .ci/run installs the same, smoke-tests a plain install
before any test, then runs pytest."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
CI_RUN = (REPO / ".ci" / "run").read_text()


def _setup_commands() -> list[str]:
    """The indented shell lines of the README's Set-up section."""
    section = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in section.splitlines() if line.startswith("    ") and line.strip()]


def _pip_installs(text: str) -> list[str]:
    return re.findall(r"pip install ([^&\n]+?)\s*(?:&&|$)", text, re.MULTILINE)


def _command_lines(script: str) -> list[str]:
    """Non-blank lines that are not comments, stripped."""
    lines = (line.strip() for line in script.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def test_the_readme_runs_a_plain_install_and_tests_with_the_test_extra() -> None:
    run, test = _setup_commands()
    assert run.endswith("spark-gateway serve") and _pip_installs(run) == ["."], run
    assert test.endswith("&& pytest") and _pip_installs(test) == ["-e '.[test]'"], test


def test_ci_installs_what_the_readme_test_command_installs_and_runs_pytest() -> None:
    _, test = _setup_commands()
    found = [i for line in _command_lines(CI_RUN) for i in _pip_installs(line)]
    ci_installs = [i.replace("--quiet ", "") for i in found if "--upgrade pip" not in i]
    assert ci_installs == _pip_installs(test)
    assert _command_lines(CI_RUN)[-1] == "pytest"


def test_ci_smoke_tests_the_installed_product_before_the_tests() -> None:
    lines = _command_lines(CI_RUN)
    smoke = [i for i, line in enumerate(lines) if ".ci/smoke_installed.sh" in line]
    assert smoke and smoke[0] < lines.index("pytest")
    script = _command_lines((REPO / ".ci" / "smoke_installed.sh").read_text())
    installs = [found for line in script if not line.startswith("step ") for found in _pip_installs(line)]
    # No extras in either install the smoke makes: exactly what the README and the Dockerfile do.
    assert installs == ["--quiet .", '--quiet --prefix="$work/prefix" .']


def test_the_test_extra_holds_the_bench_extra_and_dev_holds_test() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "spark-gateway[bench]" in extras["test"]
    assert "spark-gateway[test]" in extras["dev"]
    assert not any(name.startswith(("pytest", "openai", "httpx")) for name in extras["dev"])


def test_the_readmes_examples_write_no_file_into_the_checkout() -> None:
    """A newcomer copies them from the repository's folder: a `> file` would leave litter in the tree."""
    commands = [line for line in README.splitlines() if line.startswith("    ")]
    redirects = [line for line in commands if re.search(r"(^|\s)>\s*(?!/dev/|/tmp/|&)\S", line)]
    assert redirects == []


def test_the_agent_examples_name_the_model_the_built_in_fleet_serves() -> None:
    from gateway.commands.serve import DEFAULT_FLEET
    from gateway.sim.fleet import load_fleet

    served = {engine.served_model_name for engine in load_fleet(REPO / DEFAULT_FLEET).engines}
    doc = (REPO / "docs" / "agents.md").read_text()
    named = set(re.findall(r'(?:MODEL=|model=")([\w./-]+)', doc))
    assert named and named <= served, (named, served)
