"""Which files a ChangeSet leaves out: the patterns, the rule, and the summary a user reads."""

from __future__ import annotations

import pytest

from drover.core.build_outputs import DEFAULT_BUILD_OUTPUTS, check_patterns, left_out, matched, summary


@pytest.mark.parametrize(
    ("path", "patterns", "part"),
    [
        ("__pycache__/calc.cpython-311.pyc", DEFAULT_BUILD_OUTPUTS, "__pycache__/"),
        ("pkg/sub/__pycache__/m.cpython-311.pyc", DEFAULT_BUILD_OUTPUTS, "pkg/sub/__pycache__/"),
        ("a/__pycache__/b/__pycache__/x.pyc", DEFAULT_BUILD_OUTPUTS, "a/__pycache__/"),  # the outermost
        ("calc.pyc", DEFAULT_BUILD_OUTPUTS, "calc.pyc"),
        ("lib/old.pyc", DEFAULT_BUILD_OUTPUTS, "lib/old.pyc"),
        (".pytest_cache/v/cache/nodeids", DEFAULT_BUILD_OUTPUTS, ".pytest_cache/"),
        ("node_modules/x/index.js", DEFAULT_BUILD_OUTPUTS, "node_modules/"),
        ("web/node_modules/.bin/tsc", DEFAULT_BUILD_OUTPUTS, "web/node_modules/"),
        ("dist/app-1.0.tar.gz", DEFAULT_BUILD_OUTPUTS, "dist/"),
        ("build/lib/app.py", DEFAULT_BUILD_OUTPUTS, "build/"),
        ("app.egg-info/PKG-INFO", DEFAULT_BUILD_OUTPUTS, "app.egg-info/"),
        (".coverage", DEFAULT_BUILD_OUTPUTS, ".coverage"),
        ("htmlcov/index.html", DEFAULT_BUILD_OUTPUTS, "htmlcov/"),
        ("target/debug/app", DEFAULT_BUILD_OUTPUTS, "target/"),
        # sources that only look like build outputs stay
        ("calc.py", DEFAULT_BUILD_OUTPUTS, ""),
        ("src/build.py", DEFAULT_BUILD_OUTPUTS, ""),
        ("mybuild/x.txt", DEFAULT_BUILD_OUTPUTS, ""),
        ("dist", DEFAULT_BUILD_OUTPUTS, ""),  # a file named dist: `dist/` names a directory
        ("docs/target.md", DEFAULT_BUILD_OUTPUTS, ""),
        # a project's own patterns: anchored with a `/` inside, `**` across directories, no trailing `/`
        ("docs/_build/index.html", ("docs/_build/",), "docs/_build/"),
        ("vendor/docs/_build/index.html", ("docs/_build/",), ""),
        ("dist/x.whl", ("/dist/",), "dist/"),
        ("pkg/dist/x.whl", ("/dist/",), ""),
        ("gen/a/b/out.pb.go", ("gen/**/*.pb.go",), "gen/a/b/out.pb.go"),
        ("out/x", ("out",), "out/"),
        ("a/out", ("out",), "a/out"),
        ("f1.tmp", ("f[0-9].tmp",), "f1.tmp"),
        ("fx.tmp", ("f[!x].tmp",), ""),
        ("calc.pyc", (), ""),
    ],
)
def test_matched(path: str, patterns: tuple[str, ...], part: str) -> None:
    assert matched(path, patterns) == part


@pytest.mark.parametrize(
    ("paths", "tracked", "asked_for", "out"),
    [
        (["calc.py", "__pycache__/calc.cpython-311.pyc"], [], [], ["__pycache__/calc.cpython-311.pyc"]),
        (["build/keep.txt", "build/new.o"], ["build/keep.txt"], [], ["build/new.o"]),  # tracked stays
        (["dist/notes.md", "dist/x.whl"], [], ["dist/notes.md"], ["dist/x.whl"]),  # a write tool asked for it
        (["b.pyc", "a.pyc", "a.py"], [], [], ["a.pyc", "b.pyc"]),
        ([], [], [], []),
    ],
)
def test_left_out(paths: list[str], tracked: list[str], asked_for: list[str], out: list[str]) -> None:
    assert left_out(paths, DEFAULT_BUILD_OUTPUTS, set(tracked), set(asked_for)) == out


def test_summary_collapses_directories() -> None:
    paths = [
        "__pycache__/a.cpython-311.pyc",
        "__pycache__/b.cpython-311.pyc",
        "__pycache__/c.cpython-311.pyc",
        "node_modules/x/index.js",
        "old.pyc",
        "pkg/__pycache__/m.cpython-311.pyc",
    ]
    assert summary(paths, DEFAULT_BUILD_OUTPUTS) == [
        "__pycache__/ (3 files)",
        "node_modules/ (1 file)",
        "old.pyc",
        "pkg/__pycache__/ (1 file)",
    ]


@pytest.mark.parametrize(
    ("patterns", "message"),
    [
        (["dist/", " "], "build output pattern 2 is empty"),
        (["!keep.pyc"], "negation ('!') is not supported"),
        (["/"], "build output pattern 1 is empty"),
    ],
)
def test_check_patterns_names_the_bad_one(patterns: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_patterns(patterns)


def test_check_patterns_strips() -> None:
    assert check_patterns([" dist/ ", "*.pyc"]) == ["dist/", "*.pyc"]
