"""The REST routes of pulls, reviews, check runs and suites, and GitHub App installations."""

from __future__ import annotations

import datetime
from typing import Any

from drover.testing.fake_github import git, shapes
from drover.testing.fake_github.api import Answer, ApiError, _issue, _repo, invalid, not_found
from drover.testing.fake_github.forge import Forge


def _custom(message: str) -> ApiError:
    error = {"resource": "PullRequest", "code": "custom", "message": message}
    return ApiError(422, "Validation Failed", errors=[error])


def _closed(forge: Forge, repo: Any, login: str, item: Any, action: str) -> None:
    shape = forge.pull_json(repo, item)
    forge.event("pull_request", repo, login, action=action, number=item.number, pull_request=shape)


def create_pull(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g)
    for field in ("title", "head", "base"):
        if not isinstance(body, dict) or not body.get(field):
            raise invalid("PullRequest", field, f"{field} is missing")
    head = body["head"].split(":")[-1]
    head_sha, base_sha = git.branch(repo.path, head), git.branch(repo.path, body["base"])
    if head_sha is None:
        raise invalid("PullRequest", "head", "head is invalid")
    if base_sha is None:
        raise invalid("PullRequest", "base", "base is invalid")
    if head_sha == base_sha:
        raise _custom(f"No commits between {body['base']} and {head}")
    for other in forge.issues[repo.full_name].values():
        if other.pull and other.state == "open" and other.head == head and other.base == body["base"]:
            message = f"A pull request already exists for {repo.owner}:{head}."
            raise _custom(message)
    item = forge.new_issue(
        repo,
        body["title"],
        body.get("body"),
        login,
        pull=True,
        head=head,
        base=body["base"],
        head_sha=head_sha,
        base_sha=base_sha,
        draft=bool(body.get("draft")),
    )
    shape = forge.pull_json(repo, item)
    forge.event("pull_request", repo, login, action="opened", number=item.number, pull_request=shape)
    return 201, shape


def get_pull(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    item = _issue(forge, repo, g[2], pull=True)
    item.head_sha = git.branch(repo.path, item.head) or item.head_sha
    return 200, forge.pull_json(repo, item)


def list_pulls(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g)
    items = [i for i in forge.issues[repo.full_name].values() if i.pull and i.state == "open"]
    return 200, [forge.pull_json(repo, i) for i in sorted(items, key=lambda i: -i.number)]


def update_pull(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    item = _issue(forge, repo, g[2], pull=True)
    for field in ("title", "body"):
        if field in body:
            setattr(item, field, body[field])
    if body.get("state") in ("open", "closed") and body["state"] != item.state:
        item.state, item.closed_at = body["state"], shapes.now() if body["state"] == "closed" else None
        action = "closed" if item.state == "closed" else "reopened"
        _closed(forge, repo, login, item, action)
    item.updated_at = shapes.now()
    return 200, forge.pull_json(repo, item)


def merge_pull(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    """Merges the head into the base with `git merge-tree` (conflicts: 405 as GitHub answers)."""
    repo = _repo(forge, *g[:2])
    item = _issue(forge, repo, g[2], pull=True)
    if item.state != "open":
        raise ApiError(405, "Pull Request is not mergeable")
    head, base = git.branch(repo.path, item.head), git.branch(repo.path, item.base)
    try:
        tree = git.git(repo.path, "merge-tree", "--write-tree", str(base), str(head)).split()[0]
    except LookupError:
        raise ApiError(405, "Pull Request is not mergeable") from None
    title = (body or {}).get("commit_title") or f"Merge pull request #{item.number} from {item.head}"
    sha = git.git(repo.path, "commit-tree", tree, "-p", str(base), "-p", str(head), "-m", title)
    git.git(repo.path, "update-ref", f"refs/heads/{item.base}", sha, str(base))
    stamp = shapes.now()
    item.state, item.closed_at, item.merged_at, item.merged_by, item.merge_sha = "closed", stamp, stamp, login, sha
    _closed(forge, repo, login, item, "closed")
    return 200, {"sha": sha, "merged": True, "message": "Pull Request successfully merged"}


def list_reviews(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    pr = _issue(forge, repo, g[2], pull=True)
    found = [r for r in forge.reviews[repo.full_name].values() if r.pull == pr.number]
    return 200, [forge.review_json(repo, pr, r) for r in found]


def list_review_comments(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    pr = _issue(forge, repo, g[2], pull=True)
    found = [c for c in forge.review_comments[repo.full_name].values() if c.pull == pr.number]
    return 200, [forge.review_comment_json(repo, pr, c) for c in found]


# -- checks -----------------------------------------------------------------------------------------------


def _sha(forge: Forge, repo: Any, ref: str) -> str:
    sha = git.sha(repo.path, ref)
    if sha is None:
        raise invalid("Commit", "ref", f"No commit found for SHA: {ref}")
    return sha


def runs_for_ref(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    sha = _sha(forge, repo, g[2])
    runs = [forge.run_json(repo, r) for r in forge.runs[repo.full_name].values() if r.head_sha == sha]
    return 200, {"total_count": len(runs), "check_runs": runs}


def suites_for_ref(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    sha = _sha(forge, repo, g[2])
    suites = [forge.suite_json(repo, s) for s in forge.suites[repo.full_name].values() if s.head_sha == sha]
    return 200, {"total_count": len(suites), "check_suites": suites}


def get_run(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    run = forge.runs[repo.full_name].get(int(g[2]))
    if run is None:
        raise not_found()
    return 200, forge.run_json(repo, run)


def get_suite(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    suite = forge.suites[repo.full_name].get(int(g[2]))
    if suite is None:
        raise not_found()
    return 200, forge.suite_json(repo, suite)


# -- GitHub App installations (JWT-authenticated) ---------------------------------------------------------


def access_token(forge: Forge, app_id: str, g: list[str], body: Any) -> Answer:
    app = forge.apps[int(app_id)]
    if int(g[0]) != app.installation_id:
        raise not_found()
    token, expires = forge.issue_installation_token(app)
    stamp = datetime.datetime.fromtimestamp(expires, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = {"token": token, "expires_at": stamp, "permissions": {"contents": "write", "issues": "write"}}
    return 201, out | {"repository_selection": "all"}


def repo_installation(forge: Forge, app_id: str, g: list[str], body: Any) -> Answer:
    app = forge.apps[int(app_id)]
    repo = _repo(forge, *g)
    if repo.owner != app.owner:
        raise not_found()
    api = forge.site.api
    out: dict[str, Any] = {"id": app.installation_id, "account": forge.user(app.owner), "app_id": app.id}
    out |= {"repository_selection": "all", "access_tokens_url": f"{api}/app/installations/{out['id']}/access_tokens"}
    out |= {"repositories_url": f"{api}/installation/repositories", "app_slug": app.slug, "target_type": "User"}
    out |= {"html_url": f"{forge.site.web}/settings/installations/{out['id']}", "target_id": forge.users[app.owner]}
    out |= {"permissions": {"contents": "write", "issues": "write"}, "events": [], "single_file_name": None}
    return 200, out | {
        "created_at": shapes.EPOCH,
        "updated_at": shapes.EPOCH,
        "suspended_by": None,
        "suspended_at": None,
    }
