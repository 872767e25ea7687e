"""The pure part of a webhook delivery: the project chosen by whose secret signs the body (a table), and
the few fields kept of each event the forge loop uses."""

from __future__ import annotations

import pytest

from controlplane.domain.forge import signature
from controlplane.domain.webhooks import DeliveryFields, choose_project, delivery_fields

BODY = b'{"action":"labeled"}'
PROJECTS = [("empty", b""), ("web", b"web-secret"), ("api", b"api-secret"), ("twin", b"api-secret")]


@pytest.mark.parametrize(
    ("header", "chosen"),
    [
        (signature(b"web-secret", BODY), "web"),
        (signature(b"api-secret", BODY), "api"),  # two projects share it: the first by name order given
        (signature(b"other", BODY), None),  # forged
        (signature(b"web-secret", BODY + b" "), None),  # the body changed after signing
        (signature(b"web-secret", BODY).upper(), None),  # hex is lower case; the prefix too
        (signature(b"web-secret", BODY)[:-1], None),  # truncated
        (signature(b"web-secret", BODY).removeprefix("sha256="), None),  # no prefix
        ("sha1=" + signature(b"web-secret", BODY)[7:], None),
        ("", None),  # unsigned
        ("sha256=", None),
        (signature(b"", BODY), None),  # a project without a secret verifies nothing
    ],
)
def test_the_project_is_the_one_whose_secret_signs_the_body(header: str, chosen: str | None) -> None:
    assert choose_project(PROJECTS, BODY, header) == chosen


def test_no_projects_choose_none() -> None:
    assert choose_project([], BODY, signature(b"web-secret", BODY)) is None


def test_the_kept_fields_of_each_event() -> None:
    sender = {"sender": {"login": "alice"}, "repository": {"full_name": "octo/app"}}
    labeled = {"action": "labeled", "issue": {"number": 7}, "label": {"name": "drover"}, **sender}
    assert delivery_fields("issues", labeled) == DeliveryFields("labeled", 7, "drover", "alice")
    comment = {"action": "created", "issue": {"number": 7}, "comment": {"id": 99, "body": "/drover"}, **sender}
    assert delivery_fields("issue_comment", comment) == DeliveryFields("created", 7, "", "alice", comment_id=99)
    run = {"action": "completed", "check_run": {"head_sha": "a" * 40, "conclusion": "failure",
           "pull_requests": [{"number": 3}]}, **sender}  # fmt: skip
    assert delivery_fields("check_run", run) == DeliveryFields("completed", 3, "", "alice", "a" * 40, "failure")
    suite = {"action": "completed", "check_suite": {"head_sha": "b" * 40, "conclusion": "success",
             "pull_requests": []}, **sender}  # fmt: skip
    assert delivery_fields("check_suite", suite) == DeliveryFields("completed", 0, "", "alice", "b" * 40, "success")
    status = {"sha": "c" * 40, "state": "failure", "context": "build", **sender}
    assert delivery_fields("status", status) == DeliveryFields("", 0, "", "alice", "c" * 40, "failure")
    pull = {"action": "closed", "pull_request": {"number": 4, "head": {"sha": "d" * 40}}, **sender}
    assert delivery_fields("pull_request", pull) == DeliveryFields("closed", 4, "", "alice", "d" * 40)
    review = {"action": "submitted", "review": {"id": 5, "state": "changes_requested"},
              "pull_request": {"number": 4, "head": {"sha": "d" * 40}}, **sender}  # fmt: skip
    assert delivery_fields("pull_request_review", review) == DeliveryFields(
        "submitted", 4, "", "alice", "d" * 40, "changes_requested", 5
    )


def test_fields_of_the_wrong_type_are_left_empty() -> None:
    odd = {"action": 1, "issue": {"number": "7"}, "label": ["drover"], "sender": None, "comment": {"id": True}}
    assert delivery_fields("issue_comment", odd) == DeliveryFields()
    assert delivery_fields("check_run", {"check_run": "x"}) == DeliveryFields()
    assert delivery_fields("issues", {"issue": {"number": -1}, "action": "x" * 500}).action == "x" * 40
