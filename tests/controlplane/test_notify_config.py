"""`[[notify]]` tables: each target's URL, events, format and HMAC key (from the environment or a file,
never the TOML); a bad entry is refused with the key it is about, so the control plane does not start."""

from __future__ import annotations

import pathlib
import re

import pytest

from controlplane.config import load_harness, load_notify
from controlplane.domain.notifications import Target
from tests.conftest import ROOT

GOOD = """
[[notify]]
name = "ops"
url = "https://hooks.example/drover"
events = ["change.finished", "run.failed"]
secret_env = "OPS_HOOK_SECRET"

[[notify]]
name = "team-chat"
url = "http://chat.internal:8065/hooks/abc"
events = ["question.asked", "budget.stopped", "round.started"]
format = "slack"
secret_file = "{secret_file}"
console_url = "https://drover.example"
"""


def toml(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    path = tmp_path / "controlplane.toml"
    path.write_text(text)
    return path


def test_targets_load_with_their_secrets_from_the_environment_and_a_file(tmp_path: pathlib.Path) -> None:
    secret_file = tmp_path / "chat.secret"
    secret_file.write_text("from-a-file\n")
    path = toml(tmp_path, GOOD.format(secret_file=secret_file))
    assert load_notify(path, {"OPS_HOOK_SECRET": "from-env"}) == (
        Target("ops", "https://hooks.example/drover", ("change.finished", "run.failed"), "json", b"from-env"),
        Target(
            "team-chat",
            "http://chat.internal:8065/hooks/abc",
            ("question.asked", "budget.stopped", "round.started"),
            "slack",
            b"from-a-file",
            "https://drover.example",
        ),
    )
    assert load_harness(path, {}).default_tier == "sonnet"  # the harness reads the same file beside them
    assert load_notify(None, {}) == () and load_notify(toml(tmp_path, ""), {}) == ()


TARGET = 'name = "ops"\nurl = "https://hooks.example/x"\nevents = ["change.finished"]\nsecret_env = "S"\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (TARGET.replace("https://hooks.example/x", "ftp://hooks.example/x"), "notify[0].url: must be an http"),
        (TARGET.replace("https://hooks.example/x", "hooks.example"), "notify[0].url: must be an http"),
        (TARGET.replace("https://hooks.example/x", "https://"), "notify[0].url: must be an http"),
        (TARGET.replace("https://hooks.example/x", "http://[::1/x"), "notify[0].url: must be an http"),
        (TARGET.replace("https://hooks.example/x", "http://h.example:99999/x"), "notify[0].url: must be an http"),
        (TARGET.replace('"change.finished"', '"change.done"'), "notify[0].events: unknown ['change.done']"),
        (TARGET.replace('["change.finished"]', "[]"), "notify[0].events: a list of one or more of"),
        (TARGET.replace('["change.finished"]', '"change.finished"'), "notify[0].events: a list"),
        (TARGET + 'format = "xml"\n', "notify[0].format: 'xml' is not one of json, slack"),
        (TARGET + 'secret = "in-the-toml"\n', "notify[0]: unknown keys ['secret']"),
        (TARGET.replace('secret_env = "S"', ""), "notify[0].secret_env: set exactly one of"),
        (TARGET + 'secret_file = "/x"\n', "notify[0].secret_env: set exactly one of"),
        (TARGET.replace('"S"', '"UNSET_VAR"'), "notify[0].secret_env: the environment variable UNSET_VAR is not set"),
        (TARGET.replace('secret_env = "S"', 'secret_file = "/nonexistent/s"'), "notify[0].secret_file: cannot read"),
        (TARGET.replace('name = "ops"', 'name = ""'), "notify[0].name: a target needs a name"),
        (TARGET.replace('name = "ops"', "name = 3"), "notify[0].name: must be a string"),
        (TARGET + "\n[[notify]]\n" + TARGET, "notify[1].name: 'ops' names another target too"),
    ],
)
def test_a_bad_target_is_refused_naming_its_key(tmp_path: pathlib.Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        load_notify(toml(tmp_path, "[[notify]]\n" + text), {"S": "s3cret"})


def test_an_empty_secret_file_is_refused(tmp_path: pathlib.Path) -> None:
    empty = tmp_path / "empty.secret"
    empty.write_text("\n")
    text = "[[notify]]\n" + TARGET.replace('secret_env = "S"', f'secret_file = "{empty}"')
    with pytest.raises(ValueError, match=r"^notify\[0\]\.secret_file: .*empty.secret is empty"):
        load_notify(toml(tmp_path, text), {})


def test_the_documented_example_loads_as_written(tmp_path: pathlib.Path) -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text().split("\n#### Notifications\n", 1)[1]
    block = re.search(r"```toml\n(.*?)```", doc, re.S)
    assert block, "docs/configuration.md's [[notify]] example"
    secret_file = tmp_path / "team-chat.secret"
    secret_file.write_text("chat-key\n")
    path = toml(tmp_path, block.group(1).replace("/etc/drover/team-chat.secret", str(secret_file)))
    ops, chat = load_notify(path, {"DROVER_NOTIFY_OPS_SECRET": "ops-key"})
    assert (ops.name, ops.format, ops.secret, ops.events) == (
        "ops", "json", b"ops-key", ("change.finished", "run.failed", "budget.stopped")
    )  # fmt: skip
    assert (chat.format, chat.secret, chat.console_url) == ("slack", b"chat-key", "https://drover.example.com")
