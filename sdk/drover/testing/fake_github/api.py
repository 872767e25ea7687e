"""The REST routes: each takes the forge, the caller's login, the path's groups and the JSON body, and returns
(status, JSON) or raises ApiError with GitHub's error shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drover.testing.fake_github import git, shapes
from drover.testing.fake_github.forge import Forge
from drover.testing.fake_github.records import Comment, Issue, Repo, Status

DOCS = "https://docs.github.com/rest"
Answer = tuple[int, Any]
Route = Callable[[Forge, str, list[str], Any], Answer]


class ApiError(Exception):
    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"message": message, "documentation_url": DOCS, "status": str(status)} | extra


def not_found() -> ApiError:
    return ApiError(404, "Not Found")


def invalid(resource: str, field: str, message: str) -> ApiError:
    error = {"resource": resource, "field": field, "code": "invalid", "message": message}
    return ApiError(422, "Validation Failed", errors=[error])


def _repo(forge: Forge, owner: str, name: str) -> Repo:
    repo = forge.repos.get(f"{owner}/{name}")
    if repo is None:
        raise not_found()
    return repo


def _issue(forge: Forge, repo: Repo, number: str, *, pull: bool = False) -> Issue:
    item = forge.issues[repo.full_name].get(int(number))
    if item is None or (pull and not item.pull):
        raise not_found()
    return item


def _require(body: Any, *fields: str) -> None:
    for field in fields:
        if not isinstance(body, dict) or body.get(field) in (None, ""):
            raise invalid("Issue", field, f"{field} is missing")


# -- issues, comments, labels -----------------------------------------------------------------------------


def create_issue(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g)
    _require(body, "title")
    item = forge.new_issue(repo, body["title"], body.get("body"), login)
    item.labels = [forge.label(repo, name) for name in body.get("labels") or []]
    forge.event("issues", repo, login, action="opened", issue=forge.issue_json(repo, item))
    return 201, forge.issue_json(repo, item)


def get_issue(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    return 200, forge.issue_json(repo, _issue(forge, repo, g[2]))


def list_issues(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g)
    items = [i for i in forge.issues[repo.full_name].values() if i.state == "open"]
    return 200, [forge.issue_json(repo, i) for i in sorted(items, key=lambda i: -i.number)]


def update_issue(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    item = _issue(forge, repo, g[2])
    for field in ("title", "body"):
        if field in body:
            setattr(item, field, body[field])
    if body.get("state") in ("open", "closed"):
        item.state, item.closed_at = body["state"], shapes.now() if body["state"] == "closed" else None
    if "labels" in body:
        item.labels = [forge.label(repo, name) for name in body["labels"]]
    item.updated_at = shapes.now()
    return 200, forge.issue_json(repo, item)


def add_labels(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    item = _issue(forge, repo, g[2])
    names = body.get("labels", []) if isinstance(body, dict) else body
    if not isinstance(names, list) or not names:
        raise invalid("Label", "labels", "labels is missing")
    for name in names:
        lab = forge.label(repo, name if isinstance(name, str) else name["name"])
        if lab not in item.labels:
            item.labels.append(lab)
            shape = shapes.label(forge.site, repo, lab)
            forge.event("issues", repo, login, action="labeled", issue=forge.issue_json(repo, item), label=shape)
    return 200, [shapes.label(forge.site, repo, lab) for lab in item.labels]


def remove_label(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    item = _issue(forge, repo, g[2])
    lab = next((lab for lab in item.labels if lab.name == g[3]), None)
    if lab is None:
        raise ApiError(404, "Label does not exist")
    item.labels.remove(lab)
    shape = shapes.label(forge.site, repo, lab)
    forge.event("issues", repo, login, action="unlabeled", issue=forge.issue_json(repo, item), label=shape)
    return 200, [shapes.label(forge.site, repo, lab) for lab in item.labels]


def list_labels(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g)
    return 200, [shapes.label(forge.site, repo, lab) for lab in forge.labels[repo.full_name].values()]


def create_label(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g)
    _require(body, "name")
    if body["name"] in forge.labels[repo.full_name]:
        raise ApiError(422, "Validation Failed", errors=[{"resource": "Label", "code": "already_exists"}])
    lab = forge.label(repo, body["name"], body.get("color", "ededed"), body.get("description"))
    return 201, shapes.label(forge.site, repo, lab)


def list_comments(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    number = _issue(forge, repo, g[2]).number
    found = [c for c in forge.comments[repo.full_name].values() if c.issue == number]
    return 200, [forge.comment_json(repo, c) for c in found]


def create_comment(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    item = _issue(forge, repo, g[2])
    _require(body, "body")
    stamp = shapes.now()
    made = Comment(forge.next_id(), item.number, body["body"], login, stamp, stamp)
    forge.comments[repo.full_name][made.id] = made
    item.comment_count += 1
    shape = forge.comment_json(repo, made)
    forge.event("issue_comment", repo, login, action="created", issue=forge.issue_json(repo, item), comment=shape)
    return 201, shape


def edit_comment(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    found = forge.comments[repo.full_name].get(int(g[2]))
    if found is None:
        raise not_found()
    _require(body, "body")
    previous = found.body
    found.body, found.updated_at = body["body"], shapes.now()
    shape, item = forge.comment_json(repo, found), forge.issues[repo.full_name][found.issue]
    changes = {"body": {"from": previous}}
    forge.event("issue_comment", repo, login, action="edited", issue=forge.issue_json(repo, item), comment=shape,
                changes=changes)  # fmt: skip
    return 200, shape


def get_comment(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    found = forge.comments[repo.full_name].get(int(g[2]))
    if found is None:
        raise not_found()
    return 200, forge.comment_json(repo, found)


# -- statuses and permissions -----------------------------------------------------------------------------


def create_status(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    sha = git.sha(repo.path, g[2])
    if sha is None:
        raise invalid("Status", "sha", f"No commit found for SHA: {g[2]}")
    if body.get("state") not in ("error", "failure", "pending", "success"):
        raise invalid("Status", "state", "state is not included in the list")
    made = Status(forge.next_id(), sha, body["state"], body.get("context") or "default", login, shapes.now())
    made.description, made.target_url = body.get("description"), body.get("target_url")
    forge.statuses[repo.full_name].append(made)
    forge.event("status", repo, login, **status_event(forge, repo, made))
    return 201, forge.status_json(repo, made)


def status_event(forge: Forge, repo: Repo, made: Status) -> dict[str, Any]:
    fields = git.git(
        repo.path, "show", "-s", "--format=%T%x00%P%x00%an%x00%ae%x00%aI%x00%cn%x00%ce%x00%cI%x00%B", made.sha
    )
    tree, parents, an, ae, ad, cn, ce, cd, message = fields.split("\0")
    url = f"{forge.site.api}/repos/{repo.full_name}/commits/{made.sha}"
    html = f"{forge.site.web}/{repo.full_name}/commit/{made.sha}"
    verification = {"verified": False, "reason": "unsigned", "signature": None, "payload": None, "verified_at": None}
    inner: dict[str, Any] = {
        "author": {"name": an, "email": ae, "date": ad},
        "committer": {"name": cn, "email": ce, "date": cd},
    }
    inner |= {"message": message.strip(), "tree": {"sha": tree, "url": f"{url}/tree"}, "url": url}
    inner |= {"comment_count": 0, "verification": verification}
    commit: dict[str, Any] = {
        "sha": made.sha,
        "node_id": shapes.node_id("C", made.id),
        "commit": inner,
        "url": url,
        "html_url": html,
    }
    commit |= {"comments_url": f"{url}/comments", "author": None, "committer": None}
    commit["parents"] = [{"sha": p, "url": f"{url}/{p}", "html_url": f"{html}/{p}"} for p in parents.split()]
    out: dict[str, Any] = {"id": made.id, "sha": made.sha, "name": repo.full_name, "target_url": made.target_url}
    out |= {"context": made.context, "description": made.description, "state": made.state, "commit": commit}
    return out | {"branches": [], "created_at": made.created_at, "updated_at": made.created_at}


def list_statuses(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    sha = git.sha(repo.path, g[2])
    found = [s for s in reversed(forge.statuses[repo.full_name]) if s.sha == sha]
    return 200, [forge.status_json(repo, s) for s in found]


def combined_status(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    sha = git.sha(repo.path, g[2])
    if sha is None:
        raise invalid("Commit", "ref", f"No commit found for SHA: {g[2]}")
    latest: dict[str, Status] = {}
    for item in forge.statuses[repo.full_name]:
        if item.sha == sha:
            latest[item.context] = item
    states = {s.state for s in latest.values()}
    state = (
        "failure" if states & {"failure", "error"} else "pending" if "pending" in states or not states else "success"
    )
    statuses = [forge.status_json(repo, s) for s in latest.values()]
    url = f"{forge.site.api}/repos/{repo.full_name}/commits/{sha}"
    out = {"state": state, "statuses": statuses, "sha": sha, "total_count": len(statuses)}
    return 200, out | {"repository": forge.repo_json(repo), "commit_url": url, "url": f"{url}/status"}


def permission(forge: Forge, login: str, g: list[str], body: Any) -> Answer:
    repo = _repo(forge, *g[:2])
    if g[2] not in forge.users:
        raise ApiError(404, f"{g[2]} is not a user")
    level = repo.permissions.get(g[2], "none")
    legacy = {"maintain": "write", "triage": "read"}.get(level, level)
    user = forge.user(g[2]) | {
        "role_name": level,
        "permissions": {"admin": level == "admin", "push": legacy in ("admin", "write"), "pull": legacy != "none"},
    }
    return 200, {"permission": legacy, "role_name": level, "user": user}
