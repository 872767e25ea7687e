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
    assert harness.tiers["sonnet"].thinking == {"type": "adaptive", "display": "omitted"}
    assert harness.tiers["sonnet"].effort == "medium" and harness.attempt_ceiling_seconds == 600.0
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
        ('[tiers.sonnet]\nthinking = "on"\n', "tiers.sonnet.thinking: 'on' is not off, adaptive or a table"),
        ("[tiers.sonnet]\nthinking = { budget_tokens = 9 }\n", "tiers.sonnet.thinking: a table needs a type"),
        ('[tiers.haiku]\neffort = "hihg"\n', "tiers.haiku.effort: 'hihg' is not one of off, low, medium, high"),
        ('[tiers.opus]\nthinking_display = "full"\n', "tiers.opus.thinking_display: 'full' is not one of summ"),
        ('[tiers.opus]\nthinking = "off"\nthinking_display = "omitted"\n', "tiers.opus.thinking_display: thinking"),
        ("[harness]\nattempt_ceiling_seconds = 0\n", "harness.attempt_ceiling_seconds: must be > 0, not 0"),
        ("[harness]\nattempt_ceiling_seconds = 'long'\n", "harness.attempt_ceiling_seconds: must be float, not 'long'"),
    ],
)
def test_a_typo_or_a_wrong_type_is_refused_naming_the_table(tmp_path: pathlib.Path, text: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)):
        load_harness(path, {})
        load_memory(path, {})


def test_the_tiers_think_as_seed_000s_table_says_by_default() -> None:
    tiers = load_harness(None, {}).tiers
    assert {name: (dict(t.thinking), t.effort) for name, t in tiers.items()} == {
        "haiku": ({"type": "adaptive"}, "low"),
        "sonnet": ({"type": "adaptive", "display": "omitted"}, "medium"),
        "opus": ({"type": "adaptive", "display": "omitted"}, "high"),
    }
    assert HarnessConfig().attempt_ceiling_seconds == 600.0


@pytest.mark.parametrize(
    "table, thinking, effort",
    [
        ('thinking = "off"\neffort = "off"', {}, ""),
        ('thinking = "adaptive"', {"type": "adaptive", "display": "omitted"}, "medium"),  # the tier's display stays
        (
            'thinking = "adaptive"\nthinking_display = "summarized"\neffort = "max"',
            {"type": "adaptive", "display": "summarized"},
            "max",
        ),
        ('thinking = { type = "enabled", budget_tokens = 4000 }', {"type": "enabled", "budget_tokens": 4000}, "medium"),
        ('effort = "xhigh"', {"type": "adaptive", "display": "omitted"}, "xhigh"),
    ],
)
def test_a_tiers_thinking_takes_a_short_form_or_the_raw_table(
    tmp_path: pathlib.Path, table: str, thinking: dict, effort: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f"[tiers.sonnet]\n{table}\n[harness]\nattempt_ceiling_seconds = 90\n")
    harness = load_harness(path, {})
    assert (dict(harness.tiers["sonnet"].thinking), harness.tiers["sonnet"].effort) == (thinking, effort)
    assert harness.attempt_ceiling_seconds == 90.0
