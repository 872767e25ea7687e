"""The harness task tools' decisions: file windows, exact edits, workspace paths, the command allowlist."""

from __future__ import annotations

import os
import pathlib

import pytest

from agentd.drivers.harness.edits import Edit, EditError, apply_edits
from agentd.drivers.harness.paths import PathEscape, list_tree, resolve_inside
from drover.core.allowlist import (
    DEFAULT_PYTHON_POLICY,
    CommandPolicy,
    CommandRefused,
    check_command,
    parse_command,
    policy_from_strings,
)
from drover.core.filewindow import continuation_note, file_lines, file_window


def numbered(count: int, width: int = 9) -> str:
    """`count` lines of exactly `width` characters each, newline included."""
    return "".join(f"{n:0{width - 1}d}\n" for n in range(1, count + 1))


# --- file_window -------------------------------------------------------------------------

HUGE = "x" * 25 + "\n"

WINDOWS = [
    # (case, text, from_line, limit, expected)
    ("empty file", "", 1, 10, ""),
    ("short file", "a\nb\n", 1, 10, "a\nb\n"),
    ("no final newline", "a\nb", 1, 10, "a\nb"),
    ("exact-limit file", numbered(3), 1, 27, numbered(3)),
    ("long file ends with a note", numbered(5), 1, 20, "00000001\n00000002\n" + continuation_note(3)),
    (
        "note names the exact next line",
        numbered(5),
        1,
        27,
        "00000001\n00000002\n00000003\n[truncated: the file continues at line 4; call read_file with from_line=4]",
    ),
    ("from_line reads on", numbered(5), 4, 27, "00000004\n00000005\n"),
    ("from_line mid-file with a note", numbered(5), 2, 18, "00000002\n00000003\n" + continuation_note(4)),
    (
        "single huge line, more follow",
        HUGE + "tail\n",
        1,
        10,
        "x" * 10 + "\n[truncated: line 1 is cut after 10 of its 26 characters; "
        "the file continues at line 2; call read_file with from_line=2]",
    ),
    (
        "single huge last line",
        "ok\n" + HUGE,
        2,
        10,
        "x" * 10 + "\n[truncated: line 2 is cut after 10 of its 26 characters; it is the last line of the file]",
    ),
    ("huge line after short ones stops before it", "ok\n" + HUGE, 1, 10, "ok\n" + continuation_note(2)),
    ("past the end", "a\nb\n", 3, 10, "[line 3 is past the end: the file has 2 lines]"),
    ("past the end of a one-line file", "a", 5, 10, "[line 5 is past the end: the file has 1 line]"),
    ("past the end of an empty file", "", 2, 10, "[line 2 is past the end: the file has 0 lines]"),
    ("from_line below 1", "a\n", 0, 10, "[from_line must be 1 or more, not 0]"),
    ("a lone carriage return stays inside its line", "a\rb\nc\n", 1, 4, "a\rb\n" + continuation_note(2)),
]


@pytest.mark.parametrize("case,text,from_line,limit,expected", WINDOWS, ids=[w[0] for w in WINDOWS])
def test_file_window(case: str, text: str, from_line: int, limit: int, expected: str) -> None:
    assert file_window(text, from_line, limit) == expected


def _read_all(text: str, limit: int) -> tuple[str, int]:
    """Page through `text` as a model would, following each note; answer the text seen and the reads."""
    seen, line, reads = [], 1, 0
    while True:
        window = file_window(text, line, limit)
        reads += 1
        body, marker, rest = window.partition("[truncated: the file continues at line ")
        seen.append(body)
        if not marker:
            return "".join(seen), reads
        assert body.endswith("\n") and len(body) <= limit
        line = int(rest.split(";")[0])


PAGINGS = [
    # (case, text, limit)
    ("equal lines", numbered(100), 50),
    ("limit a multiple of the line", numbered(100), 45),
    ("ragged lines", "".join("y" * (n % 13) + "\n" for n in range(300)), 40),
    ("no final newline", numbered(40) + "last", 33),
    ("blank lines", "\n" * 50 + "end\n", 7),
    ("default 40,000 limit", numbered(20_000, width=20), 40_000),
]


@pytest.mark.parametrize("case,text,limit", PAGINGS, ids=[p[0] for p in PAGINGS])
def test_following_the_notes_reads_every_line_once(case: str, text: str, limit: int) -> None:
    seen, reads = _read_all(text, limit)
    assert seen == text
    assert reads >= len(text) // limit


def test_file_lines_split_only_on_newline() -> None:
    assert file_lines("a\n\x0cb\r\nc") == ["a\n", "\x0cb\r\n", "c"]


def test_file_window_rejects_a_limit_below_one() -> None:
    with pytest.raises(ValueError, match="limit"):
        file_window("a", 1, 0)


# --- apply_edits -------------------------------------------------------------------------

SOURCE = "def f():\n    return 1\n\n\ndef g():\n    return 2\n"

GOOD_EDITS = [
    # (case, edits, expected)
    ("single", [Edit("return 1", "return 10")], SOURCE.replace("return 1", "return 10")),
    (
        "multiple in order",
        [Edit("def f", "def first"), Edit("return 1", "return 10"), Edit("return 2", "return 20")],
        "def first():\n    return 10\n\n\ndef g():\n    return 20\n",
    ),
    (
        "adjacent edits",
        [Edit("def f():\n", "def h():\n"), Edit("    return 1\n", "    pass\n")],
        "def h():\n    pass\n\n\ndef g():\n    return 2\n",
    ),
    ("delete text", [Edit("\n\ndef g():\n    return 2\n", "")], "def f():\n    return 1\n"),
    ("new_text may repeat old text", [Edit("return 2", "return 2 + 2")], SOURCE.replace("return 2", "return 2 + 2")),
    ("no edits", [], SOURCE),
]


@pytest.mark.parametrize("case,edits,expected", GOOD_EDITS, ids=[e[0] for e in GOOD_EDITS])
def test_apply_edits(case: str, edits: list[Edit], expected: str) -> None:
    assert apply_edits(SOURCE, edits) == expected


BAD_EDITS = [
    # (case, text, edits, index, message)
    ("not found", SOURCE, [Edit("return 3", "x")], 0, "edit 0: old_text not found"),
    (
        "not found names the second edit",
        SOURCE,
        [Edit("return 1", "x"), Edit("nope", "y")],
        1,
        "edit 1: old_text not found",
    ),
    (
        "chained on an earlier edit's output",
        SOURCE,
        [Edit("return 1", "return one"), Edit("return one", "return 1.0")],
        1,
        "edit 1: old_text not found; it occurs only in the new_text of edit 0",
    ),
    (
        "whitespace differs",
        SOURCE,
        [Edit("  return 1  \n", "x")],
        0,
        "edit 0: old_text not found (it matches only with different leading or trailing whitespace)",
    ),
    (
        "ambiguous",
        "a = 1\na = 1\na = 1\n",
        [Edit("a = 1", "a = 2")],
        0,
        "edit 0: old_text occurs 3 times; it must occur exactly once",
    ),
    (
        "overlapping occurrences are ambiguous too",
        "aaa",
        [Edit("aa", "b")],
        0,
        "edit 0: old_text occurs 2 times; it must occur exactly once",
    ),
    (
        "ambiguous second edit",
        SOURCE,
        [Edit("def f", "def h"), Edit("return", "yield")],
        1,
        "edit 1: old_text occurs 2 times; it must occur exactly once",
    ),
    (
        "out of order",
        SOURCE,
        [Edit("def f", "def h"), Edit("return 2", "x"), Edit("return 1", "y")],
        2,
        "edit 2: old_text not found after edit 1",
    ),
    (
        "overlapping",
        SOURCE,
        [Edit("def f():\n    return", "x"), Edit("return 1", "y")],
        1,
        "edit 1: old_text overlaps the old_text of edit 0",
    ),
    (
        "contained in an earlier edit",
        SOURCE,
        [Edit("def f():\n    return 1", "x"), Edit("f()", "y")],
        1,
        "edit 1: old_text overlaps the old_text of edit 0",
    ),
    (
        "overlapping an edit before the previous one",
        SOURCE,
        [Edit("def f():\n    return 1", "x"), Edit("return 2", "y"), Edit("f()", "z")],
        2,
        "edit 2: old_text overlaps the old_text of edit 0",
    ),
    ("empty old_text", SOURCE, [Edit("", "x")], 0, "edit 0: old_text is empty"),
    ("empty old_text after good edits", SOURCE, [Edit("return 1", "x"), Edit("", "y")], 1, "edit 1: old_text is empty"),
]


@pytest.mark.parametrize("case,text,edits,index,message", BAD_EDITS, ids=[e[0] for e in BAD_EDITS])
def test_apply_edits_refuses(case: str, text: str, edits: list[Edit], index: int, message: str) -> None:
    with pytest.raises(EditError) as caught:
        apply_edits(text, edits)
    assert caught.value.index == index
    assert str(caught.value).startswith(message)
    assert str(caught.value) == f"edit {index}: {caught.value.reason}"


@pytest.mark.parametrize("case,text,edits,index,message", BAD_EDITS, ids=[e[0] for e in BAD_EDITS])
def test_a_failed_edit_changes_nothing_on_disk(
    tmp_path: pathlib.Path, case: str, text: str, edits: list[Edit], index: int, message: str
) -> None:
    target = tmp_path / "module.py"
    target.write_text(text)
    with pytest.raises(EditError):
        target.write_text(apply_edits(target.read_text(), edits))  # as edit_file does: write on success
    assert target.read_text() == text


def test_edit_is_frozen() -> None:
    with pytest.raises(AttributeError):
        Edit("a", "b").old_text = "c"  # type: ignore[misc]


# --- resolve_inside and list_tree --------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    """A workspace root with a .git dir, files, and symlinks in and out; a secret next to it."""
    root = tmp_path / "ws"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "README.md").write_text("hi\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    os.symlink(outside / "secret.txt", root / "leak.txt")
    os.symlink(outside, root / "leakdir")
    os.symlink("../../outside", root / "src" / "up")
    os.symlink(tmp_path / "nowhere" / "new.txt", root / "dangling")
    os.symlink("src/pkg/mod.py", root / "alias.py")
    os.symlink("src/pkg", root / "pkglink")
    os.symlink(".git", root / "gitlink")
    os.symlink("loop_b", root / "loop_a")
    os.symlink("loop_a", root / "loop_b")
    return root


ALLOWED_PATHS = [
    # (relative, expected path relative to the root)
    ("README.md", "README.md"),
    ("src/pkg/mod.py", "src/pkg/mod.py"),
    ("./src//pkg/./mod.py", "src/pkg/mod.py"),
    ("src/../README.md", "README.md"),
    ("new.txt", "new.txt"),
    ("brand/new/dir/file.py", "brand/new/dir/file.py"),
    ("alias.py", "src/pkg/mod.py"),
    ("pkglink/mod.py", "src/pkg/mod.py"),
    ("pkglink/not_yet.py", "src/pkg/not_yet.py"),
    (".", "."),
    ("src/.gitignore", "src/.gitignore"),
    ("~/x", "~/x"),
]


@pytest.mark.parametrize("relative,expected", ALLOWED_PATHS, ids=[p[0] for p in ALLOWED_PATHS])
def test_resolve_inside_allows(workspace: pathlib.Path, relative: str, expected: str) -> None:
    assert resolve_inside(workspace, relative) == (workspace / expected).resolve()


ESCAPES = [
    # (relative, reason fragment)
    ("", "empty"),
    ("../outside/secret.txt", "'..' leaves the workspace"),
    ("src/../../outside", "'..' leaves the workspace"),
    ("..", "'..' leaves the workspace"),
    ("/etc/passwd", "absolute"),
    ("//etc/passwd", "absolute"),
    ("leak.txt", "outside the workspace"),
    ("leakdir/secret.txt", "outside the workspace"),
    ("leakdir/new.txt", "outside the workspace"),
    ("leakdir/a/b/new.txt", "outside the workspace"),
    ("src/up/secret.txt", "outside the workspace"),
    ("dangling", "outside the workspace"),
    ("pkglink/../../outside", "'..' leaves the workspace"),
    (".git", "git directory"),
    (".git/config", "git directory"),
    ("src/../.git/hooks/pre-commit", "git directory"),
    (".GIT/config", "git directory"),
    ("src/sub/.git/config", "git directory"),
    ("gitlink/config", "resolves into the git directory"),
    ("bad\x00name", "NUL"),
    ("loop_a", "symlink loop"),
    ("loop_a/x.py", "symlink loop"),
]


@pytest.mark.parametrize("relative,reason", ESCAPES, ids=[repr(e[0]) for e in ESCAPES])
def test_resolve_inside_refuses(workspace: pathlib.Path, relative: str, reason: str) -> None:
    with pytest.raises(PathEscape) as caught:
        resolve_inside(workspace, relative)
    assert caught.value.path == relative
    assert reason in caught.value.reason
    assert repr(relative) in str(caught.value)


def test_resolve_inside_follows_a_symlinked_root(workspace: pathlib.Path, tmp_path: pathlib.Path) -> None:
    os.symlink(workspace, tmp_path / "rootlink")
    assert resolve_inside(tmp_path / "rootlink", "README.md") == (workspace / "README.md").resolve()


def test_list_tree(workspace: pathlib.Path) -> None:
    assert list_tree(workspace) == [
        "README.md",
        "alias.py",
        "dangling",
        "gitlink",
        "leak.txt",
        "leakdir",
        "loop_a",
        "loop_b",
        "pkglink",
        "src/pkg/mod.py",
        "src/up",
    ]


TRUNCATIONS = [
    # (files, max_entries, expected)
    (3, 5, ["f0", "f1", "f2"]),
    (3, 3, ["f0", "f1", "f2"]),
    (5, 2, ["f0", "f1", "[truncated: 2 of 5 entries shown]"]),
]


@pytest.mark.parametrize("files,max_entries,expected", TRUNCATIONS)
def test_list_tree_truncates(tmp_path: pathlib.Path, files: int, max_entries: int, expected: list[str]) -> None:
    for n in range(files):
        (tmp_path / f"f{n}").write_text("")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("")
    assert list_tree(tmp_path, max_entries) == expected


def test_list_tree_sorts_as_strings(tmp_path: pathlib.Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").write_text("")
    (tmp_path / "a.txt").write_text("")
    (tmp_path / "B").write_text("")
    assert list_tree(tmp_path) == ["B", "a.txt", "a/b"]


# --- the command allowlist ---------------------------------------------------------------

ACCEPTED = [
    # (the default rule, a command it accepts)
    ("pytest [args]", "pytest"),
    ("pytest [args]", "pytest -q tests/test_x.py::test_y -k 'a and not b'"),
    ("pytest [args]", "pytest ../elsewhere -x"),
    ("python -m pytest [args]", "python -m pytest -q"),
    ("python -m pytest [args]", "python -m pytest tests"),
    ("python3 -m pytest [args]", "python3 -m pytest --maxfail=1 tests/unit"),
    ("python -m unittest [args]", "python -m unittest"),
    ("python -m unittest [args]", "python -m unittest discover -s tests -v"),
    ("python3 -m unittest [args]", "python3 -m unittest tests.test_x"),
    ("python -m py_compile [paths]", "python -m py_compile app/main.py app/models.py"),
    ("python -m py_compile [paths]", "python -m py_compile"),
    ("git status|diff|log|show [args]", "git status"),
    ("git status|diff|log|show [args]", "git status --short"),
    ("git status|diff|log|show [args]", "git diff"),
    ("git status|diff|log|show [args]", "git diff main -- src"),
    ("git status|diff|log|show [args]", "git log --oneline -n 5"),
    ("git status|diff|log|show [args]", "git show HEAD"),
    ("ls [paths]", "ls"),
    ("ls [paths]", "ls src src/pkg"),
    ("cat [paths]", "cat README.md src/pkg/mod.py"),
    ("cat [paths]", 'cat "docs/a file with spaces.md"'),
]


@pytest.mark.parametrize("rule,command", ACCEPTED, ids=[a[1] for a in ACCEPTED])
def test_default_policy_accepts(rule: str, command: str) -> None:
    check_command(parse_command(command), DEFAULT_PYTHON_POLICY)
    check_command(parse_command(command), CommandPolicy((rule,)))  # and that very rule does


def test_every_default_rule_has_an_accepted_example() -> None:
    assert {rule for rule, _ in ACCEPTED} == set(DEFAULT_PYTHON_POLICY.rules)


METACHARACTER_CASES = [
    ("pytest; rm -rf /", "';'"),
    ("pytest | tee out", "'|'"),
    ("pytest && ls", "'&'"),
    ("pytest &", "'&'"),
    ("cat $HOME/x", "'$'"),
    ("cat `id`", "'`'"),
    ("cat < x", "'<'"),
    ("ls > out", "'>'"),
    ("ls (x)", "'('"),
    ("ls x)", "')'"),
    ("ls {a,b}", "'{'"),
    ("ls a}", "'}'"),
    ("ls a\\ b", "'\\'"),
    ("ls\nrm x", "a newline"),
    ("ls *.py", "'*'"),
    ("ls ?.py", "'?'"),
    ("ls ~", "'~'"),
    ("git diff HEAD~1", "'~'"),
    ("git log !", "'!'"),
    ("ls 'a;b'", "';'"),  # quoting does not help: the raw string is checked
    ("ls a\rb", "a carriage return"),
]


@pytest.mark.parametrize("command,named", METACHARACTER_CASES, ids=[repr(c[0]) for c in METACHARACTER_CASES])
def test_parse_command_refuses_metacharacters(command: str, named: str) -> None:
    with pytest.raises(CommandRefused) as caught:
        parse_command(command)
    assert f"contains {named}" in caught.value.reason


@pytest.mark.parametrize("command,named", METACHARACTER_CASES, ids=[repr(c[0]) for c in METACHARACTER_CASES])
def test_check_command_refuses_metacharacters_in_argv(command: str, named: str) -> None:
    with pytest.raises(CommandRefused, match="metacharacter"):
        check_command(["cat", command], DEFAULT_PYTHON_POLICY)


PARSED = [
    ("pytest -k 'a and b'", ["pytest", "-k", "a and b"]),
    ('cat "x y"', ["cat", "x y"]),
    ("  ls   src  ", ["ls", "src"]),
    ("git log --format=%H", ["git", "log", "--format=%H"]),
]


@pytest.mark.parametrize("command,argv", PARSED)
def test_parse_command_splits_like_posix_shlex(command: str, argv: list[str]) -> None:
    assert parse_command(command) == argv


@pytest.mark.parametrize(
    "command,reason",
    [
        ("", "empty"),
        ("   ", "empty"),
        ("cat 'open", "cannot be parsed"),
    ],
)
def test_parse_command_refuses_empty_and_unparseable(command: str, reason: str) -> None:
    with pytest.raises(CommandRefused, match=reason):
        parse_command(command)


NPM = CommandPolicy(("npm install", "npm run <script>", "npm test [paths]"))

REFUSED = [
    # (argv, policy, scripts, reason fragment)
    (["npm", "run", "-x"], NPM, None, "a script name may not start with -"),
    (["npm", "run", "--", "build"], NPM, None, "a script name may not start with -"),
    (
        ["npm", "run", "deploy"],
        NPM,
        frozenset({"build", "test"}),
        "'deploy' is not a known script (known: build, test)",
    ),
    (["npm", "run"], NPM, None, "missing a script name"),
    (["npm", "run", "build", "extra"], NPM, None, "unexpected extra word 'extra'"),
    (["npm", "install", "left-pad"], NPM, None, "unexpected extra word 'left-pad'"),
    (["npm", "publish"], NPM, None, "'publish' is not allowed after 'npm' (expected 'install', 'run', 'test')"),
    (["rm", "-rf", "src"], DEFAULT_PYTHON_POLICY, None, "'rm' is not an allowed program"),
    (["bash"], DEFAULT_PYTHON_POLICY, None, "'bash' is not an allowed program"),
    (["python", "-c", "import os"], DEFAULT_PYTHON_POLICY, None, "'-c' is not allowed after 'python' (expected '-m')"),
    (
        ["python", "-m", "pip", "install", "x"],
        DEFAULT_PYTHON_POLICY,
        None,
        "'pip' is not allowed after 'python -m' (expected 'py_compile', 'pytest', 'unittest')",
    ),
    (
        ["git", "push"],
        DEFAULT_PYTHON_POLICY,
        None,
        "'push' is not allowed after 'git' (expected 'diff', 'log', 'show', 'status')",
    ),
    (["git"], DEFAULT_PYTHON_POLICY, None, "missing status or diff or log or show after 'git'"),
    (["ls", "../outside"], DEFAULT_PYTHON_POLICY, None, "'../outside' has a '..' component"),
    (["cat", "src/../../etc/passwd"], DEFAULT_PYTHON_POLICY, None, "has a '..' component"),
    (["cat", "/etc/passwd"], DEFAULT_PYTHON_POLICY, None, "'/etc/passwd' is absolute"),
    (["ls", "-la"], DEFAULT_PYTHON_POLICY, None, "'-la' is an option"),
    (["python", "-m", "py_compile", "/tmp/x.py"], DEFAULT_PYTHON_POLICY, None, "is absolute"),
    (["cat", ""], DEFAULT_PYTHON_POLICY, None, "an empty word is not a path"),
    (["npm", "test", "a", ".."], NPM, None, "'..' has a '..' component"),
    ([], DEFAULT_PYTHON_POLICY, None, "the command is empty"),
]


@pytest.mark.parametrize("argv,policy,scripts,reason", REFUSED, ids=[" ".join(r[0]) or "empty" for r in REFUSED])
def test_check_command_refuses(
    argv: list[str], policy: CommandPolicy, scripts: frozenset[str] | None, reason: str
) -> None:
    with pytest.raises(CommandRefused) as caught:
        check_command(argv, policy, scripts)
    assert reason in caught.value.reason
    if argv:
        assert caught.value.reason.endswith("Allowed patterns:\n" + "\n".join(f"  {r}" for r in policy.rules))


def test_an_unknown_program_lists_every_allowed_pattern() -> None:
    with pytest.raises(CommandRefused) as caught:
        check_command(["make"], DEFAULT_PYTHON_POLICY)
    for rule in DEFAULT_PYTHON_POLICY.rules:
        assert f"\n  {rule}" in str(caught.value)


@pytest.mark.parametrize(
    "argv,scripts",
    [
        (["npm", "run", "build"], None),
        (["npm", "run", "build"], frozenset({"build"})),
        (["npm", "install"], frozenset()),
        (["npm", "test"], None),
        (["npm", "test", "src/a.test.js", "./b"], None),
    ],
)
def test_npm_policy_accepts(argv: list[str], scripts: frozenset[str] | None) -> None:
    check_command(argv, NPM, scripts)


BAD_RULES = [
    ("", "the rule is empty"),
    ("[paths]", "cannot be the program"),
    ("<script>", "cannot be the program"),
    ("ls [paths] -l", "may only be the last word"),
    ("ls [args] [paths]", "may only be the last word"),
    ("npm run <name>", "unknown placeholder '<name>'"),
    ("ls [files]", "unknown placeholder '[files]'"),
    ("git status||diff", "empty alternative"),
    ("git status|", "empty alternative"),
    ("bash;ls", "contains ';'"),
    ("ls a]b", "contains ']'"),
]


@pytest.mark.parametrize("rule,reason", BAD_RULES, ids=[b[0] or "empty" for b in BAD_RULES])
def test_rule_syntax_is_checked(rule: str, reason: str) -> None:
    with pytest.raises(ValueError) as caught:
        policy_from_strings(["ls [paths]", rule]) if rule else CommandPolicy((rule,))
    assert str(caught.value).startswith(f"bad command rule {rule!r}: ")
    assert reason in str(caught.value)


def test_policy_from_strings_skips_blanks_and_comments() -> None:
    policy = policy_from_strings(["# test runners", "", "  pytest   [args] ", "git status|diff"])
    assert policy == CommandPolicy(("pytest [args]", "git status|diff"))
    check_command(["git", "diff"], policy)
