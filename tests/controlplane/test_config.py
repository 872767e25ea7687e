"""The control plane's TOML configuration: the example in docs/configuration.md loads as written, each setting's
default lives on its dataclass, and a typo or a wrong type is refused with the table it is in."""

from __future__ import annotations

import pathlib
import re

import pytest

from controlplane.config import BudgetConfig, HarnessConfig, MemoryConfig, load_harness, load_memory
from tests.conftest import ROOT

CONFIGURATION_DOC = ROOT / "docs" / "configuration.md"


def _readme_example(tmp_path: pathlib.Path) -> pathlib.Path:
    block = re.search(r"```toml\n(\[anthropic\].*?)```", CONFIGURATION_DOC.read_text(), re.S)
    assert block, "the configuration example of docs/configuration.md"
    key = tmp_path / "anthropic.key"
    key.write_text("sk-from-file\n")
    path = tmp_path / "controlplane.toml"
    path.write_text(block.group(1).replace("/etc/drover/anthropic.key", str(key)))
    return path


def test_the_readme_example_loads_as_written(tmp_path: pathlib.Path) -> None:
    path = _readme_example(tmp_path)
    harness = load_harness(path, {})
    assert harness.api_key == "sk-from-file" and harness.base_url == "https://api.anthropic.com"
    assert harness.budgets == BudgetConfig(provider_month_usd=10.0, agent_calls_per_day=1000)
    assert harness.tiers["sonnet"].thinking == {"type": "enabled", "budget_tokens": 4000}
    assert [m.instance_id for m in harness.classes["sonnet"].members] == ["acct-a", "payg"]
    assert load_memory(path, {}) == MemoryConfig(queries_per_day=1000)


def test_missing_settings_take_the_dataclass_defaults() -> None:
    harness = load_harness(None, {"ANTHROPIC_API_KEY": "k"})
    defaults = HarnessConfig()
    assert (harness.default_tier, harness.max_attempts, harness.fold_fraction, harness.budgets) == (
        defaults.default_tier,
        defaults.max_attempts,
        defaults.fold_fraction,
        BudgetConfig(),
    )
    assert load_memory(None, {"DROVER_MEMORY": "off"}) == MemoryConfig(enabled=False)


def test_settings_are_converted_to_the_type_of_their_field(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[budgets]\nprovider_month_usd = 25\n[harness]\nfold_fraction = 1\n")
    harness = load_harness(path, {})
    assert harness.budgets.provider_month_usd == 25.0 and isinstance(harness.budgets.provider_month_usd, float)
    assert harness.fold_fraction == 1.0 and isinstance(harness.fold_fraction, float)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[budgets]\nprovider_month = 5\n", "budgets: unknown settings ['provider_month']"),
        ("[harness]\nmax_attempt = 5\n", "harness: unknown settings ['max_attempt']"),
        ("[harness]\nmax_attempts = 'many'\n", "harness.max_attempts: must be int, not 'many'"),
        ("[memory]\nqueries = 5\n", "memory: unknown settings ['queries']"),
        ("[budget]\n", "unknown tables ['budget']"),
        ("[anthropic]\napi_kye_file = '/k'\n", "anthropic: unknown keys ['api_kye_file']"),
        ("[tiers.sonnet]\nmodle = 'claude'\n", "tiers.sonnet: unknown keys ['modle']"),
        ("[prices.m]\ninput = 1\noutput = 2\ncache = 3\n", "prices.m: unknown keys ['cache']"),
        ('[anthropic]\nworkspace_id = "wrk\\nx: y"\n', "anthropic.workspace_id: 'wrk\\nx: y' is not a workspace id"),
        ("[anthropic]\nworkspace_id = 7\n", "anthropic.workspace_id: 7 is not a workspace id"),
    ],
)
def test_a_typo_or_a_wrong_type_is_refused_naming_the_table(tmp_path: pathlib.Path, text: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)):
        load_harness(path, {})
        load_memory(path, {})
