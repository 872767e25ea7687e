"""docs/configuration.md's settings tables against the code: every agentd setting is a row with its real
flag and default, every row a setting; every flag of `controlplane serve` is in the control plane's table."""

from __future__ import annotations

import dataclasses
import re

from agentd import cli as agentd_cli
from agentd.daemon.config import AgentConfig
from controlplane import cli as controlplane_cli
from tests.conftest import ROOT

DOC = (ROOT / "docs" / "configuration.md").read_text()


def table_after(heading: str) -> list[list[str]]:
    """The cells of the first table under `heading`, header and rule left out."""
    section = DOC.split(f"\n{heading}\n", 1)[1]
    rows = re.search(r"^(\|.*\|\n)+", section, re.MULTILINE)
    assert rows, f"no table under {heading}"
    lines = rows.group(0).splitlines()[2:]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip()[1:-1])] for line in lines]


def code_spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def agentd_rows() -> dict[str, tuple[str, str]]:
    """key -> (flag cell, default cell); a row naming two keys (`tls_cert`, `tls_key`) gives both."""
    rows = {}
    for key_cell, flag_cell, default_cell, _ in table_after("### agentd"):
        keys = code_spans(key_cell.split("(")[0])
        defaults = [d.strip() for d in default_cell.split(",")] if len(keys) > 1 else [default_cell]
        for i, key in enumerate(keys):
            rows[key] = (flag_cell, defaults[i] if i < len(defaults) else default_cell)
    return rows


def as_written(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def test_every_agentd_setting_has_a_row_and_every_row_is_a_setting() -> None:
    fields = {f.name for f in dataclasses.fields(AgentConfig)}
    documented = set(agentd_rows())
    assert fields - documented == set(), "settings of AgentConfig missing from docs/configuration.md"
    assert documented - fields == set(), "rows of docs/configuration.md that are no setting"


def test_agentd_rows_name_real_flags_and_true_defaults() -> None:
    flags = {opt for action in agentd_cli.parser()._actions for opt in action.option_strings}
    defaults = AgentConfig(name="x")
    for key, (flag_cell, default_cell) in agentd_rows().items():
        for flag in code_spans(flag_cell):
            assert flag.split()[0] in flags, f"{key}: agentd has no flag {flag}"
        literal = re.fullmatch(r"`([^`]*)`(?: \(.*\))?", default_cell)
        field = next(f for f in dataclasses.fields(AgentConfig) if f.name == key)
        if literal and field.default is not dataclasses.MISSING and not isinstance(field.default, type(None)):
            value = getattr(defaults, key)
            if isinstance(value, (bool, int, float, str)):
                written = literal.group(1)
                assert written in (as_written(value), as_written(int(value)) if isinstance(value, float) else ""), (
                    f"{key}: docs say {written}, AgentConfig says {value!r}"
                )


def test_every_flag_of_controlplane_serve_is_documented() -> None:
    serve = next(
        action.choices["serve"]
        for action in controlplane_cli.parser()._actions
        if getattr(action, "choices", None) and "serve" in action.choices
    )
    flags = {opt for action in serve._actions for opt in action.option_strings if opt.startswith("--")} - {"--help"}
    section = DOC.split("\n### Control plane\n", 1)[1].split("\n### agentd\n", 1)[0]
    documented = set(re.findall(r"`(--[a-z0-9-]+)", section))
    assert flags - documented == set(), "flags of controlplane serve missing from docs/configuration.md"
