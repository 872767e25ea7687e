"""Stacked workspaces, ChangeSet publishing and Candidate composition on real repositories."""

from __future__ import annotations

import base64
import dataclasses
import http.server
import pathlib
import threading
from collections.abc import Iterator, Sequence
from typing import ClassVar

import pygit2
import pytest

from drover.core.forge_branches import push_branch
from drover.core.gitspace import (
    ChangeSetResult,
    MergeConflict,
    StackItem,
    compose_candidate,
    open_workspace,
)
from drover.core.workspace import WorkspaceError, git_dir, open_repository

TOKEN = "ghs_s3cretT0kenValue"


@pytest.fixture(params=["bare", "non-bare"])
def origin(request: pytest.FixtureRequest, git_repo: pathlib.Path, tmp_path: pathlib.Path) -> str:
    """The project repository (README.md, app.py on main), bare or with a work tree."""
    if request.param == "non-bare":
        return str(git_repo)
    bare = tmp_path / "origin.git"
    pygit2.clone_repository(str(git_repo), str(bare), bare=True)
    return str(bare)


def tree_files(origin: str, ref: str) -> dict[str, str]:
    """Path -> text of every file in `ref` of the origin."""
    repo = pygit2.Repository(origin)
    out: dict[str, str] = {}

    def walk(tree: pygit2.Tree, prefix: str) -> None:
        for entry in tree:
            if entry.type_str == "tree":
                walk(repo[entry.id].peel(pygit2.Tree), f"{prefix}{entry.name}/")
            else:
                out[prefix + entry.name] = repo[entry.id].data.decode()

    walk(repo.revparse_single(ref).peel(pygit2.Tree), "")
    return out


def origin_branches(origin: str) -> set[str]:
    return set(pygit2.Repository(origin).branches.local)


def publish_task(
    tmp_path: pathlib.Path, origin: str, task_id: str, edits: dict[str, str], stack: Sequence[StackItem] = ()
) -> ChangeSetResult:
    ws = open_workspace(tmp_path / f"ws-{task_id}", origin, "main", stack)
    for path, text in edits.items():
        (ws.path / path).parent.mkdir(parents=True, exist_ok=True)
        (ws.path / path).write_text(text)
    return ws.publish("ch1", task_id, f"{task_id} edits")


def item(result: ChangeSetResult, n: int) -> StackItem:
    return StackItem(f"cs-{n}", f"t{n}", result.branch, result.commit, f"2024-05-0{n}T00:00:00Z")


def apply_patch(tmp_path: pathlib.Path, origin: str, at: str, patch: str) -> pathlib.Path:
    clone = tmp_path / f"apply-{at[:8]}"
    repo = pygit2.clone_repository(origin, str(clone))
    repo.reset(at, pygit2.enums.ResetMode.HARD)
    repo.apply(pygit2.Diff.parse_diff(patch))
    return clone


def test_publish_simple_edit(tmp_path: pathlib.Path, origin: str) -> None:
    ws = open_workspace(tmp_path / "ws", origin, "main", [])
    assert ws.start_commit == ws.base_commit == str(pygit2.Repository(origin).revparse_single("main").id)
    (ws.path / "app.py").write_text("print('hello, world')\n")
    (ws.path / "pkg").mkdir()
    (ws.path / "pkg" / "new.py").write_text("x = 1\n")
    result = ws.publish("ch1", "t1", "t1 edits")

    assert result.branch == "drover/ch1/t1" and "drover/ch1/t1" in origin_branches(origin)
    assert str(pygit2.Repository(origin).branches.local["drover/ch1/t1"].target) == result.commit
    assert result.files == result.own_files == ["app.py", "pkg/new.py"]
    assert result.stacked_on == [] and result.base_commit == result.start_commit == ws.base_commit
    applied = apply_patch(tmp_path, origin, result.base_commit, result.patch)
    assert (applied / "app.py").read_text() == "print('hello, world')\n"
    assert (applied / "pkg" / "new.py").read_text() == "x = 1\n"
    assert tree_files(origin, "main")["app.py"] == "print('hello')\n"  # main untouched

    again = ws.publish("ch1", "t1", "t1 edits")
    assert again == result
    assert str(pygit2.Repository(origin).branches.local["drover/ch1/t1"].target) == result.commit


def test_untouched_workspace_publishes_start_commit_without_a_commit(tmp_path: pathlib.Path, origin: str) -> None:
    ws = open_workspace(tmp_path / "ws", origin, "main", [])
    result = ws.publish("ch1", "t1", "nothing")
    assert result.commit == ws.start_commit and result.files == result.own_files == [] and result.patch == ""
    assert "drover/ch1/t1" in origin_branches(origin)


def test_deletions_are_published_and_gitignore_respected(tmp_path: pathlib.Path, origin: str) -> None:
    ws = open_workspace(tmp_path / "ws", origin, "main", [])
    (ws.path / "README.md").unlink()
    (ws.path / ".gitignore").write_text("*.log\n")
    (ws.path / "build.log").write_text("noise\n")
    result = ws.publish("ch1", "t1", "delete readme")
    assert result.files == [".gitignore", "README.md"]
    assert set(tree_files(origin, result.branch)) == {".gitignore", "app.py"}
    applied = apply_patch(tmp_path, origin, result.base_commit, result.patch)
    assert not (applied / "README.md").exists()


def test_stacked_workspace_merges_both_dependencies(tmp_path: pathlib.Path, origin: str) -> None:
    r1 = publish_task(tmp_path, origin, "t1", {"schema.sql": "create table t;\n"})
    r2 = publish_task(tmp_path, origin, "t2", {"api.py": "def api(): ...\n"})
    stack = [item(r1, 1), item(r2, 2)]
    ws = open_workspace(tmp_path / "ws-t3", origin, "main", stack)

    assert ws.stacked_on == ["cs-1", "cs-2"]
    assert ws.start_commit != ws.base_commit
    assert (ws.path / "schema.sql").exists() and (ws.path / "api.py").exists()
    start = open_repository(ws.path)[ws.start_commit]
    assert {str(p) for p in start.parent_ids} == {r1.commit, r2.commit}  # t1 fast-forward, t2 merged

    (ws.path / "ui.js").write_text("render()\n")
    r3 = ws.publish("ch1", "t3", "t3 UI")
    assert r3.stacked_on == ["cs-1", "cs-2"] and r3.start_commit == ws.start_commit
    assert r3.own_files == ["ui.js"]
    assert r3.files == ["api.py", "schema.sql", "ui.js"]
    assert "schema.sql" not in r3.patch and "api.py" not in r3.patch
    applied = apply_patch(tmp_path, origin, r3.start_commit, r3.patch)
    assert (applied / "ui.js").read_text() == "render()\n"


def test_stack_merges_the_recorded_commit_not_a_later_tip(tmp_path: pathlib.Path, origin: str) -> None:
    ws1 = open_workspace(tmp_path / "ws-t1", origin, "main", [])
    (ws1.path / "a.txt").write_text("first\n")
    r1 = ws1.publish("ch1", "t1", "first")
    (ws1.path / "b.txt").write_text("later\n")
    ws1.publish("ch1", "t1", "later")
    ws = open_workspace(tmp_path / "ws-t2", origin, "main", [item(r1, 1)])
    assert ws.start_commit == r1.commit and not (ws.path / "b.txt").exists()


def test_dependency_conflict_raises_and_leaves_nothing(tmp_path: pathlib.Path, origin: str) -> None:
    r1 = publish_task(tmp_path, origin, "t1", {"app.py": "print('one')\n"})
    r2 = publish_task(tmp_path, origin, "t2", {"app.py": "print('two')\n"})
    before = origin_branches(origin)
    path = tmp_path / "ws-t3"
    with pytest.raises(MergeConflict) as err:
        open_workspace(path, origin, "main", [item(r1, 1), item(r2, 2)])
    assert err.value.changeset_id == "cs-2" and err.value.files == ["app.py"]
    assert "app.py" in str(err.value)
    assert isinstance(err.value, WorkspaceError)
    assert path.is_dir() and not any(path.iterdir())
    assert origin_branches(origin) == before and not any(b.endswith("/t3") for b in before)


def test_compose_candidate_with_shared_history(tmp_path: pathlib.Path, origin: str) -> None:
    r1 = publish_task(tmp_path, origin, "t1", {"schema.sql": "create table t;\n"})
    r2 = publish_task(tmp_path, origin, "t2", {"api.py": "def api(): ...\n"})
    r3 = publish_task(tmp_path, origin, "t3", {"ui.js": "render()\n"}, [item(r1, 1), item(r2, 2)])
    work = tmp_path / "compose"
    result = compose_candidate(origin, "main", "ch1", [item(r1, 1), item(r2, 2), item(r3, 3)], work)

    assert result.branch == "drover/ch1/candidate"
    assert result.files == ["api.py", "schema.sql", "ui.js"]
    assert str(pygit2.Repository(origin).branches.local[result.branch].target) == result.commit
    files = tree_files(origin, result.branch)
    assert files["schema.sql"] == "create table t;\n" and files["api.py"] == "def api(): ...\n"
    assert files["ui.js"] == "render()\n" and files["README.md"] == "# sample\n"
    assert not any(work.iterdir())  # the fresh clone is removed


def test_compose_candidate_conflict_pushes_nothing(tmp_path: pathlib.Path, origin: str) -> None:
    r1 = publish_task(tmp_path, origin, "t1", {"app.py": "print('one')\n"})
    r2 = publish_task(tmp_path, origin, "t2", {"app.py": "print('two')\n"})
    with pytest.raises(MergeConflict) as err:
        compose_candidate(origin, "main", "ch1", [item(r1, 1), item(r2, 2)], tmp_path / "compose")
    assert err.value.changeset_id == "cs-2" and err.value.files == ["app.py"]
    assert "drover/ch1/candidate" not in origin_branches(origin)


def test_a_candidate_is_pushed_to_its_pull_request_branch_again_and_again(tmp_path: pathlib.Path, origin: str) -> None:
    r1 = publish_task(tmp_path, origin, "t1", {"fix.py": "fixed = True\n"})
    made = compose_candidate(origin, "main", "ch1", [item(r1, 1)], tmp_path / "compose")
    for _ in range(2):  # after a crash the same push is made again: the branch stays on the commit
        push_branch(origin, made.branch, made.commit, "drover/issue-7", tmp_path / "push")
        assert str(pygit2.Repository(origin).branches.local["drover/issue-7"].target) == made.commit
    assert tree_files(origin, "drover/issue-7")["fix.py"] == "fixed = True\n"
    assert not any((tmp_path / "push").iterdir())  # the scratch repository is removed
    with pytest.raises(WorkspaceError, match="not a valid branch name"):
        push_branch(origin, made.branch, made.commit, "drover/issue..7", tmp_path / "push")
    other = publish_task(tmp_path, origin, "t2", {"other.py": "x = 1\n"})  # a commit, but not the candidate's
    with pytest.raises(WorkspaceError, match="is not on drover/ch1/candidate"):
        push_branch(origin, made.branch, other.commit, "drover/issue-8", tmp_path / "push")
    assert "drover/issue-8" not in origin_branches(origin)


def test_publish_rejects_a_bad_branch_name(tmp_path: pathlib.Path, origin: str) -> None:
    ws = open_workspace(tmp_path / "ws", origin, "main", [])
    with pytest.raises(WorkspaceError, match="not a valid branch name"):
        ws.publish("ch..1", "t1", "x")


def test_empty_origin_workspace(tmp_path: pathlib.Path) -> None:
    empty = tmp_path / "empty.git"
    pygit2.init_repository(str(empty), bare=True, initial_head="main")
    ws = open_workspace(tmp_path / "ws", str(empty), "main", [])
    assert ws.base_commit == ws.start_commit == ""
    (ws.path / "first.txt").write_text("hi\n")
    result = ws.publish("ch1", "t1", "first")
    assert result.files == result.own_files == ["first.txt"] and "+hi" in result.patch
    assert tree_files(str(empty), result.branch) == {"first.txt": "hi\n"}


class _AuthRecorder(http.server.BaseHTTPRequestHandler):
    """A git smart-HTTP server that refuses every request with 401 and records what it saw."""

    seen: ClassVar[list[tuple[str, str]]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization", "")))
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="git"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_server() -> Iterator[tuple[str, list[tuple[str, str]]]]:
    seen: ClassVar[list[tuple[str, str]]] = []
    handler = type("Handler", (_AuthRecorder,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/org/repo.git", seen
    finally:
        server.shutdown()
        server.server_close()


def _assert_no_token(err: BaseException | None) -> None:
    while err is not None:
        assert TOKEN not in str(err) and TOKEN not in repr(err)
        err = err.__cause__ or err.__context__


def test_token_never_in_clone_failure(tmp_path: pathlib.Path) -> None:
    with pytest.raises(WorkspaceError) as err:
        open_workspace(tmp_path / "ws", "https://127.0.0.1:1/x.git", "main", [], token=TOKEN)
    _assert_no_token(err.value)
    with pytest.raises(WorkspaceError) as err:
        compose_candidate("https://127.0.0.1:1/x.git", "main", "ch1", [], tmp_path / "c", token=TOKEN)
    _assert_no_token(err.value)


def test_token_goes_only_through_credentials(tmp_path: pathlib.Path, refusing_server) -> None:
    url, seen = refusing_server
    with pytest.raises(WorkspaceError) as err:
        open_workspace(tmp_path / "ws", url, "main", [], token=TOKEN)
    _assert_no_token(err.value)
    auth = {base64.b64decode(h.split()[1]).decode() for _, h in seen if h}
    assert auth == {f"x-access-token:{TOKEN}"}  # the token was offered, as Basic credentials
    assert all(TOKEN not in path for path, _ in seen)


def test_refused_token_on_push_fails_cleanly(tmp_path: pathlib.Path, git_repo: pathlib.Path, refusing_server) -> None:
    url, seen = refusing_server
    ws = open_workspace(tmp_path / "ws", str(git_repo), "main", [], token=TOKEN)
    ws.repo_url = url  # pushes go where the assignment says, here a server refusing the token
    (ws.path / "app.py").write_text("print('x')\n")
    with pytest.raises(WorkspaceError) as err:
        ws.publish("ch1", "t1", "x")
    _assert_no_token(err.value)
    assert any(h for _, h in seen) and all(TOKEN not in path for path, _ in seen)
    assert TOKEN not in repr(ws)


def test_token_never_in_results(tmp_path: pathlib.Path, origin: str) -> None:
    ws = open_workspace(tmp_path / "ws", origin, "main", [], token=TOKEN)
    (ws.path / "app.py").write_text("print('x')\n")
    result = ws.publish("ch1", "t1", "x")
    assert TOKEN not in repr(dataclasses.asdict(result)) and TOKEN not in repr(ws)
    assert TOKEN not in (git_dir(ws.path) / "config").read_text()
    candidate = compose_candidate(origin, "main", "ch1", [item(result, 1)], tmp_path / "c", token=TOKEN)
    assert TOKEN not in repr(candidate)


def test_missing_dependency_branch_fails_cleanly(tmp_path: pathlib.Path, origin: str) -> None:
    missing = StackItem("cs-9", "t9", "drover/ch1/t9", "", "2024-05-09T00:00:00Z")
    path = tmp_path / "ws"
    with pytest.raises(WorkspaceError, match="cs-9"):
        open_workspace(path, origin, "main", [missing])
    assert path.is_dir() and not any(path.iterdir())


def _origin_with(path: pathlib.Path, files: dict[str, str]) -> str:
    """A repository with `files` (subdirectories allowed) in one commit on main."""
    repo = pygit2.init_repository(str(path), initial_head="main")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    repo.index.add_all()
    repo.index.write()
    sig = pygit2.Signature("Test", "test@drover.invalid")
    repo.create_commit("HEAD", sig, sig, "initial", repo.index.write_tree(), [])
    return str(path)


def test_build_outputs_are_left_out_of_the_changeset(tmp_path: pathlib.Path) -> None:
    """A one-line fix plus what running the tests wrote: only the fix is committed, the rest is listed."""
    origin = _origin_with(
        tmp_path / "origin", {"calc.py": "def add(a, b):\n    return a - b\n", "build/keep.txt": "kept\n"}
    )
    ws = open_workspace(tmp_path / "ws", origin, "main", [])
    (ws.path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    outputs = {
        "__pycache__/calc.cpython-311.pyc": "\x00pyc",
        ".pytest_cache/v/cache/nodeids": "[]",
        "node_modules/x/index.js": "module.exports = 1\n",
        "build/lib/calc.py": "copy\n",
    }
    for name, text in outputs.items():
        (ws.path / name).parent.mkdir(parents=True, exist_ok=True)
        (ws.path / name).write_text(text)
    (ws.path / "build" / "keep.txt").write_text("kept, and changed\n")  # tracked: published like any edit

    result = ws.publish("ch1", "t1", "fix add")

    assert result.files == result.own_files == ["build/keep.txt", "calc.py"]
    assert set(tree_files(origin, result.branch)) == {"calc.py", "build/keep.txt"}
    assert tree_files(origin, result.branch)["build/keep.txt"] == "kept, and changed\n"
    assert result.left_out == sorted(outputs)
    assert "pyc" not in result.patch and "node_modules" not in result.patch
    assert all((ws.path / name).exists() for name in outputs)  # left out of the commit, not deleted
    assert ws.publish("ch1", "t1", "fix add") == result  # publishing again decides the same


def test_a_build_output_a_write_tool_asked_for_is_published(tmp_path: pathlib.Path, origin: str) -> None:
    ws = open_workspace(tmp_path / "ws", origin, "main", [])
    (ws.path / "dist").mkdir()
    (ws.path / "dist" / "README.md").write_text("how to release\n")
    (ws.path / "dist" / "app.whl").write_text("zip\n")
    result = ws.publish("ch1", "t1", "release notes", asked_for={"dist/README.md"})
    assert result.own_files == ["dist/README.md"] and result.left_out == ["dist/app.whl"]


def test_a_project_list_replaces_the_default(tmp_path: pathlib.Path, origin: str) -> None:
    ws = open_workspace(tmp_path / "ws", origin, "main", [])
    (ws.path / "__pycache__").mkdir()
    (ws.path / "__pycache__" / "app.cpython-311.pyc").write_text("pyc\n")
    (ws.path / "out.bin").write_text("bin\n")
    result = ws.publish("ch1", "t1", "x", leave_out=["*.bin"])
    assert result.own_files == ["__pycache__/app.cpython-311.pyc"] and result.left_out == ["out.bin"]
