"""The JSON GitHub sends, built minimal but whole: every field githubkit's models require (REST responses
and webhook payloads alike, which need a few more: reactions, assignees, topics...) with GitHub's names.

Each builder takes the `Site` (where the API and the web pages are) and the fake's records."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

EPOCH = "2026-01-01T00:00:00Z"
REPO_URLS = (
    "archive",
    "assignees",
    "blobs",
    "branches",
    "collaborators",
    "comments",
    "commits",
    "compare",
    "contents",
    "contributors",
    "deployments",
    "downloads",
    "events",
    "forks",
    "git_commits",
    "git_refs",
    "git_tags",
    "issue_comment",
    "issue_events",
    "issues",
    "keys",
    "labels",
    "languages",
    "merges",
    "milestones",
    "notifications",
    "pulls",
    "releases",
    "stargazers",
    "statuses",
    "subscribers",
    "subscription",
    "tags",
    "teams",
    "trees",
    "hooks",
)
USER_URLS = (
    "followers",
    "following",
    "gists",
    "starred",
    "subscriptions",
    "organizations",
    "repos",
    "events",
    "received_events",
)
REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "eyes", "rocket")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_id(kind: str, ident: int) -> str:
    return f"{kind}_{ident:08d}"


@dataclasses.dataclass(frozen=True)
class Site:
    api: str
    """The API root without the trailing slash: http://127.0.0.1:PORT/api/v3."""
    web: str
    """The pages' root: http://127.0.0.1:PORT (repositories are cloned from WEB/OWNER/NAME.git)."""


def user(site: Site, login: str, ident: int, kind: str = "User") -> dict[str, Any]:
    url = f"{site.api}/users/{login}"
    out: dict[str, Any] = {"login": login, "id": ident, "node_id": node_id("U", ident), "type": kind}
    out |= {"avatar_url": f"{site.web}/avatars/{login}", "gravatar_id": "", "url": url}
    out |= {"html_url": f"{site.web}/{login}", "site_admin": False, "name": None, "email": None}
    return out | {f"{name}_url": f"{url}/{name}" for name in USER_URLS}


def repository(site: Site, repo: Any, owner: dict[str, Any]) -> dict[str, Any]:
    url = f"{site.api}/repos/{repo.full_name}"
    out: dict[str, Any] = {f"{name}_url": f"{url}/{name}" for name in REPO_URLS}
    out |= {"id": repo.id, "node_id": node_id("R", repo.id), "name": repo.name, "full_name": repo.full_name}
    out |= {"owner": owner, "private": True, "html_url": f"{site.web}/{repo.full_name}", "description": None}
    out |= {"fork": False, "url": url, "git_url": f"{site.web}/{repo.full_name}.git", "mirror_url": None}
    out |= {"ssh_url": f"git@127.0.0.1:{repo.full_name}.git", "clone_url": f"{site.web}/{repo.full_name}.git"}
    out |= {"svn_url": f"{site.web}/{repo.full_name}", "homepage": None, "language": None, "license": None}
    out |= {"forks": 0, "forks_count": 0, "stargazers_count": 0, "watchers_count": 0, "watchers": 0, "size": 0}
    out |= {"default_branch": repo.default_branch, "open_issues_count": 0, "open_issues": 0, "has_pages": False}
    out |= {"disabled": False, "archived": False, "topics": [], "visibility": "private"}
    return out | {"pushed_at": EPOCH, "created_at": EPOCH, "updated_at": EPOCH}


def label(site: Site, repo: Any, lab: Any) -> dict[str, Any]:
    url = f"{site.api}/repos/{repo.full_name}/labels/{lab.name}"
    out = {"id": lab.id, "node_id": node_id("LA", lab.id), "url": url, "name": lab.name, "color": lab.color}
    return out | {"description": lab.description, "default": False, "archived_at": None, "archived_by": None}


def reactions(url: str) -> dict[str, Any]:
    return {"url": f"{url}/reactions", "total_count": 0} | dict.fromkeys(REACTIONS, 0)


def issue(site: Site, repo: Any, item: Any, users: Any) -> dict[str, Any]:
    api = f"{site.api}/repos/{repo.full_name}"
    url = f"{api}/issues/{item.number}"
    out: dict[str, Any] = {"id": item.id, "node_id": node_id("I", item.id), "url": url, "number": item.number}
    out |= {"repository_url": api, "labels_url": f"{url}/labels{{/name}}", "comments_url": f"{url}/comments"}
    out |= {"events_url": f"{url}/events", "html_url": f"{site.web}/{repo.full_name}/issues/{item.number}"}
    out |= {"state": item.state, "state_reason": None, "title": item.title, "body": item.body}
    out |= {"user": users(item.author), "labels": [label(site, repo, lab) for lab in item.labels]}
    out |= {"assignee": None, "assignees": [], "milestone": None, "locked": False, "active_lock_reason": None}
    out |= {"comments": item.comment_count, "closed_at": item.closed_at, "created_at": item.created_at}
    out |= {"updated_at": item.updated_at, "author_association": "COLLABORATOR", "reactions": reactions(url)}
    if item.pull:
        pr = f"{api}/pulls/{item.number}"
        out["pull_request"] = {"url": pr, "html_url": f"{site.web}/{repo.full_name}/pull/{item.number}"}
        out["pull_request"] |= {"diff_url": f"{pr}.diff", "patch_url": f"{pr}.patch", "merged_at": item.merged_at}
    return out


def comment(site: Site, repo: Any, item: Any, users: Any) -> dict[str, Any]:
    api = f"{site.api}/repos/{repo.full_name}"
    url = f"{api}/issues/comments/{item.id}"
    out: dict[str, Any] = {"id": item.id, "node_id": node_id("IC", item.id), "url": url, "body": item.body}
    out |= {"html_url": f"{site.web}/{repo.full_name}/issues/{item.issue}#issuecomment-{item.id}"}
    out |= {"issue_url": f"{api}/issues/{item.issue}", "user": users(item.author), "created_at": item.created_at}
    out |= {"updated_at": item.updated_at, "author_association": "COLLABORATOR", "reactions": reactions(url)}
    return out | {"performed_via_github_app": None}


def _links(**hrefs: str) -> dict[str, Any]:
    return {name: {"href": href} for name, href in hrefs.items()}


def pull(site: Site, repo: Any, item: Any, users: Any, repo_json: dict[str, Any]) -> dict[str, Any]:
    api = f"{site.api}/repos/{repo.full_name}"
    url, html = f"{api}/pulls/{item.number}", f"{site.web}/{repo.full_name}/pull/{item.number}"
    issue_url = f"{api}/issues/{item.number}"
    owner = repo.full_name.split("/")[0]
    out = issue(site, repo, item, users)
    for key in ("repository_url", "labels_url", "events_url", "pull_request", "reactions", "state_reason"):
        out.pop(key, None)
    out |= {"url": url, "html_url": html, "diff_url": f"{url}.diff", "patch_url": f"{url}.patch"}
    out |= {"issue_url": issue_url, "commits_url": f"{url}/commits", "review_comments_url": f"{url}/comments"}
    out |= {"review_comment_url": f"{api}/pulls/comments{{/number}}", "comments_url": f"{issue_url}/comments"}
    out |= {"statuses_url": f"{api}/statuses/{item.head_sha}", "merged_at": item.merged_at, "draft": item.draft}
    for side, ref, sha in (("head", item.head, item.head_sha), ("base", item.base, item.base_sha)):
        out[side] = {"label": f"{owner}:{ref}", "ref": ref, "sha": sha, "user": repo_json["owner"], "repo": repo_json}
    out["_links"] = _links(
        self=url, html=html, issue=issue_url, comments=f"{issue_url}/comments", review_comments=f"{url}/comments",
        review_comment=f"{api}/pulls/comments{{/number}}", commits=f"{url}/commits", statuses=out["statuses_url"],
    )  # fmt: skip
    out |= {"auto_merge": None, "requested_reviewers": [], "requested_teams": [], "merged": item.merged_at is not None}
    out |= {"mergeable": True, "mergeable_state": "clean", "rebaseable": True, "merge_commit_sha": item.merge_sha}
    out |= {"merged_by": users(item.merged_by) if item.merged_by else None, "review_comments": item.review_comments}
    return out | {"maintainer_can_modify": False, "commits": 1, "additions": 0, "deletions": 0, "changed_files": 0}


def app(site: Site, the_app: Any, owner: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"id": the_app.id, "slug": the_app.slug, "node_id": node_id("A", the_app.id)}
    out |= {"client_id": f"Iv1.{the_app.id:016x}", "owner": owner, "name": the_app.slug, "description": None}
    out |= {"external_url": site.web, "html_url": f"{site.web}/apps/{the_app.slug}"}
    return out | {"created_at": EPOCH, "updated_at": EPOCH, "permissions": {}, "events": []}


def check_run(site: Site, repo: Any, run: Any, suite_json: dict[str, Any], app_json: Any) -> dict[str, Any]:
    url = f"{site.api}/repos/{repo.full_name}/check-runs/{run.id}"
    out: dict[str, Any] = {"id": run.id, "head_sha": run.head_sha, "node_id": node_id("CR", run.id), "url": url}
    html = f"{site.web}/{repo.full_name}/runs/{run.id}"
    out |= {"external_id": "", "html_url": html, "name": run.name}
    out |= {"details_url": run.details_url or html, "status": run.status, "conclusion": run.conclusion}
    out |= {"started_at": run.started_at, "completed_at": run.completed_at, "app": app_json}
    out["output"] = {"title": run.title, "summary": run.summary, "text": run.text, "annotations_count": 0}
    out["output"]["annotations_url"] = f"{url}/annotations"
    return out | {"check_suite": {"id": suite_json["id"]}, "pull_requests": []}


def check_suite(site: Site, repo: Any, suite: Any, repo_json: Any, app_json: Any, commit: Any) -> dict[str, Any]:
    url = f"{site.api}/repos/{repo.full_name}/check-suites/{suite.id}"
    out: dict[str, Any] = {"id": suite.id, "node_id": node_id("CS", suite.id), "head_branch": suite.head_branch}
    out |= {"head_sha": suite.head_sha, "status": suite.status, "conclusion": suite.conclusion, "url": url}
    out |= {"before": None, "after": suite.head_sha, "pull_requests": [], "app": app_json, "repository": repo_json}
    out |= {"created_at": suite.created_at, "updated_at": suite.updated_at, "head_commit": commit}
    return out | {"latest_check_runs_count": suite.runs, "check_runs_url": f"{url}/check-runs", "rerequestable": True}


def status(site: Site, repo: Any, item: Any, creator: dict[str, Any]) -> dict[str, Any]:
    url = f"{site.api}/repos/{repo.full_name}/statuses/{item.sha}"
    out: dict[str, Any] = {"url": url, "avatar_url": None, "id": item.id, "node_id": node_id("SC", item.id)}
    out |= {"state": item.state, "description": item.description, "target_url": item.target_url}
    out |= {"context": item.context, "created_at": item.created_at, "updated_at": item.created_at}
    return out | {"creator": creator}


def review(site: Site, repo: Any, pr: Any, item: Any, users: Any) -> dict[str, Any]:
    pr_url = f"{site.api}/repos/{repo.full_name}/pulls/{pr.number}"
    html = f"{site.web}/{repo.full_name}/pull/{pr.number}#pullrequestreview-{item.id}"
    out: dict[str, Any] = {"id": item.id, "node_id": node_id("PRR", item.id), "user": users(item.author)}
    out |= {"body": item.body, "state": item.state, "html_url": html, "pull_request_url": pr_url}
    out |= {"_links": _links(html=html, pull_request=pr_url), "submitted_at": item.submitted_at}
    return out | {"commit_id": item.commit_id, "author_association": "COLLABORATOR"}


def review_comment(site: Site, repo: Any, pr: Any, item: Any, users: Any) -> dict[str, Any]:
    api = f"{site.api}/repos/{repo.full_name}"
    url, pr_url = f"{api}/pulls/comments/{item.id}", f"{api}/pulls/{pr.number}"
    html = f"{site.web}/{repo.full_name}/pull/{pr.number}#discussion_r{item.id}"
    out: dict[str, Any] = {"url": url, "pull_request_review_id": item.review, "id": item.id, "body": item.body}
    out |= {"node_id": node_id("PRRC", item.id), "diff_hunk": f"@@ -{item.line},1 +{item.line},1 @@"}
    out |= {"path": item.path, "position": item.line, "original_position": item.line, "commit_id": item.commit_id}
    out |= {"original_commit_id": item.commit_id, "user": users(item.author), "created_at": item.created_at}
    out |= {"updated_at": item.created_at, "html_url": html, "pull_request_url": pr_url, "line": item.line}
    out |= {"original_line": item.line, "side": "RIGHT", "start_line": None, "original_start_line": None}
    out |= {"start_side": None, "in_reply_to_id": None, "subject_type": "line", "reactions": reactions(url)}
    out |= {"author_association": "COLLABORATOR", "_links": _links(self=url, html=html, pull_request=pr_url)}
    return out
