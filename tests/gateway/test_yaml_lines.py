"""One loader for the YAML files the gateway reads into models (config, fleet and trace files): every
problem as `file:line: location: message`, raised as the file kind's own error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, model_validator

from gateway.bench.routing_tracefile import TraceError, load_trace
from gateway.settings import SettingsError, load_config
from gateway.sim.fleet import FleetError, load_fleet
from gateway.yaml_lines import LocatedError, YamlFileError, load_model

FLEET = """\
name: f
engines:
  - name: a
    served_model_name: m
  - name: b
    port: 9002
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "file.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_fleet_file_problem_names_the_line_of_the_entry_at_fault(tmp_path: Path) -> None:
    path = _write(tmp_path, FLEET)
    with pytest.raises(FleetError) as caught:
        load_fleet(path)
    assert caught.value.lines == [f"{path}:5: engines.1.served_model_name: Field required"]


def test_a_trace_file_problem_names_its_line(tmp_path: Path) -> None:
    classes = "classes:\n  a: {prompt_tokens: 8, max_tokens: 8}\n  b: {prompt_tokens: -1, max_tokens: 8}\n"
    path = _write(tmp_path, classes + "phases: []\n")
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert caught.value.lines == [
        f"{path}:3: classes.b.prompt_tokens: Input should be greater than or equal to 0",
        f"{path}:4: phases: List should have at least 1 item after validation, not 0",
    ]


@pytest.mark.parametrize(
    ("load", "error"), [(load_fleet, FleetError), (load_trace, TraceError), (load_config, SettingsError)]
)
def test_every_loader_reports_bad_yaml_and_a_non_mapping_alike(
    tmp_path: Path, load: Any, error: type[YamlFileError]
) -> None:
    path = _write(tmp_path, "name: f\nengines: [a\n")
    with pytest.raises(error) as caught:
        load(path)
    assert len(caught.value.lines) == 1
    assert caught.value.lines[0].startswith(f"{path}:3: invalid YAML: ")
    path = _write(tmp_path, "- a\n- b\n")
    with pytest.raises(error) as caught:
        load(path)
    assert caught.value.lines == [f"{path}:1: the file must hold a mapping"]


class _Pair(BaseModel):
    low: int
    high: int

    @model_validator(mode="after")
    def _ordered(self) -> _Pair:
        if self.high < self.low:
            raise LocatedError(("high",), "must not be below low")
        return self


def test_a_located_error_from_a_validator_is_reported_at_its_field(tmp_path: Path) -> None:
    path = _write(tmp_path, "# a pair\nlow: 5\nhigh: 2\n")
    with pytest.raises(YamlFileError) as caught:
        load_model(path, _Pair)
    assert caught.value.lines == [f"{path}:3: high: must not be below low"]
