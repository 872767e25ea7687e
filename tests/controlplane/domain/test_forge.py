"""controlplane/domain/forge.py: a webhook delivery's signature checked in constant time (the receiver of
issue 28's next slice calls it before anything of the body is parsed), and the forge settings' rules."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from controlplane.domain import forge
from drover.errors import InvalidArgument

SECRET = b"s3cret-webhook"
BODY = b'{"action":"labeled","issue":{"number":7}}'
GOOD = "sha256=" + hmac.new(SECRET, BODY, hashlib.sha256).hexdigest()


@pytest.mark.parametrize(
    ("secret", "body", "header", "verified"),
    [
        (SECRET, BODY, GOOD, True),  # as GitHub computes it (independently of forge.signature)
        (b"another secret", BODY, GOOD, False),  # wrong secret
        (SECRET, BODY + b" ", GOOD, False),  # the body changed on the way
        (SECRET, BODY, GOOD.removeprefix("sha256="), False),  # missing prefix
        (SECRET, BODY, "sha1=" + GOOD.removeprefix("sha256="), False),  # another algorithm's prefix
        (SECRET, BODY, GOOD[:-1], False),  # one digit short
        (SECRET, BODY, GOOD + "0", False),  # one digit long
        (SECRET, BODY, GOOD.upper().replace("SHA256=", "sha256="), False),  # GitHub sends lower-case hex
        (SECRET, BODY, "", False),  # no header
        (SECRET, BODY, "sha256=", False),  # an empty digest
        (b"", BODY, "sha256=" + hmac.new(b"", BODY, hashlib.sha256).hexdigest(), False),  # no secret set
        (SECRET, b"", "sha256=" + hmac.new(SECRET, b"", hashlib.sha256).hexdigest(), True),  # an empty body
        (SECRET, BODY, "sha256=" + "é" * 64, False),  # not ASCII: refused, not an exception
    ],
)
def test_verify_signature(secret: bytes, body: bytes, header: str, verified: bool) -> None:
    assert forge.verify_signature(secret, body, header) is verified


def test_signature_is_what_github_sends() -> None:
    assert forge.signature(SECRET, BODY) == GOOD


@pytest.mark.parametrize(
    "repo", ["octo/web", "Octo-Org/web.app", "a/b", "o1-2-3/_x-y.z", "x" * 39 + "/" + "y" * 100, "octo/.github"]
)
def test_github_repository_names(repo: str) -> None:
    assert forge.check_repo("github", repo) == repo


@pytest.mark.parametrize(
    "repo",
    ["octo", "octo/", "/web", "-octo/web", "octo-/web", "oc--to/web", "x" * 40 + "/web", "octo/" + "y" * 101,
     "octo/.", "octo/..", "octo/web.git", "octo/we b", "oc_to/web", "octo/web/x"],
)  # fmt: skip
def test_what_github_refuses_is_refused_naming_forge_repo(repo: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        forge.check_repo("github", repo)
    assert refused.value.field == "forge_repo"


@pytest.mark.parametrize(
    ("url", "stored"),
    [
        ("", "https://api.github.com"),
        ("https://ghe.example.com/api/v3/", "https://ghe.example.com/api/v3"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://127.9.9.9/", "http://127.9.9.9"),
        ("http://localhost:9/api", "http://localhost:9/api"),
        ("http://[::1]:9", "http://[::1]:9"),
    ],
)
def test_api_urls(url: str, stored: str) -> None:
    assert forge.check_api_url("github", url) == stored


@pytest.mark.parametrize(
    "url",
    ["http://api.example.com", "http://10.0.0.1", "http://localhost.example.com", "https://u:p@ghe.example.com",
     "https://tok@ghe.example.com", "ftp://ghe.example.com", "https://", "https://h/?q=1", "https://h/#f",
     "https://h:port", "https://h /x", "https://[::1"],
)  # fmt: skip
def test_refused_api_urls_name_forge_api_url(url: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        forge.check_api_url("github", url)
    assert refused.value.field == "forge_api_url"


def test_without_a_forge_there_is_no_repository_and_no_url() -> None:
    assert (forge.check_repo("", ""), forge.check_api_url("", ""), forge.check_api_url("", forge.GITHUB_API)) == (
        "",
        "",
        "",
    )
    for check, field in ((lambda: forge.check_repo("", "o/r"), "forge_repo"),
                         (lambda: forge.check_api_url("", "https://h"), "forge_api_url"),
                         (lambda: forge.check_forge("gitlab"), "forge")):  # fmt: skip
        with pytest.raises(InvalidArgument) as refused:
            check()
        assert refused.value.field == field


@pytest.mark.parametrize(("rounds", "ok"), [(0, True), (3, True), (20, True), (21, False), (-1, False)])
def test_fix_rounds(rounds: int, ok: bool) -> None:
    if ok:
        assert forge.check_fix_rounds(rounds) == rounds
    else:
        with pytest.raises(InvalidArgument, match="0 to 20"):
            forge.check_fix_rounds(rounds)


@pytest.mark.parametrize(("label", "stored"), [("", "drover"), ("ai: fix", "ai: fix"), ("x" * 50, "x" * 50)])
def test_labels(label: str, stored: str) -> None:
    assert forge.check_label(label) == stored


@pytest.mark.parametrize("label", [" drover", "drover ", "x" * 51, "a\nb", "a\x7f"])
def test_refused_labels(label: str) -> None:
    with pytest.raises(InvalidArgument):
        forge.check_label(label)


@pytest.mark.parametrize(
    ("template", "branch"),
    [
        ("drover/issue-{number}", "drover/issue-42"),
        ("ai/{slug}-{number}", "ai/fix-the-login-form-42"),
        ("bot/{change}", "bot/ch-abc"),
        ("", "drover/issue-42"),  # the default
    ],
)
def test_an_issues_branch_is_rendered_from_the_template(template: str, branch: str) -> None:
    assert forge.issue_branch(template, 42, "ch-abc", "Fix the login form!") == branch


@pytest.mark.parametrize(
    "template",
    ["", "x/{slug}", "plain", "{number}{task}", "{number!r}", "{number:3}", "{}", "a b{number}", "{number}/",
     "-{number}", "a..{number}", "{number}.lock", "a~{number}", "x" * 200 + "{number}"],
)  # fmt: skip
def test_a_branch_template_that_is_not_one_branch_per_issue_is_refused(template: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        forge.check_branch_template(template)
    assert refused.value.field == "forge_branch_template"


@pytest.mark.parametrize("budget", [-1.0, float("nan"), float("inf"), float("-inf")])
def test_a_budget_must_be_finite_and_not_negative(budget: float) -> None:
    with pytest.raises(InvalidArgument) as refused:
        forge.check_budget(budget)
    assert refused.value.field == "forge_budget_usd"
    assert forge.check_budget(0.0) == 0.0 and forge.check_budget(2.5) == 2.5


def test_a_check_command_is_at_most_4_kib() -> None:
    assert forge.check_check_command("x" * 4096) == "x" * 4096
    with pytest.raises(InvalidArgument) as refused:
        forge.check_check_command("é" * 2049)  # 4098 bytes
    assert refused.value.field == "forge_check_command"
