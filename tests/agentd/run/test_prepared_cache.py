"""The prepared-workspace key and cache: on real directories in tmp_path."""

from __future__ import annotations

import os
import pathlib

import pytest

from agentd.run import prepared_cache, prepared_key
from agentd.run.prepared_cache import PreparedCache

KEY_ARGS = ("https://git.example/app.git", "main", ["pip install -e ."], {"A": "1"})


def tree(tmp_path: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    root = tmp_path / "tree"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    ("path", "pattern", "expected"),
    [
        ("requirements.txt", "requirements*.txt", True),
        ("requirements-dev.txt", "requirements*.txt", True),
        ("sub/requirements.txt", "requirements*.txt", False),
        ("sub/requirements.txt", "**/requirements*.txt", True),
        ("requirements.txt", "**/requirements*.txt", True),
        ("a/b/package-lock.json", "a/**/package-lock.json", True),
        ("a/package-lock.json", "a/*/package-lock.json", False),
        ("pyproject.toml", "pyproject.toml", True),
        ("pyproject.toml.bak", "pyproject.toml", False),
    ],
)
def test_patterns_match_paths_relative_to_the_repository(path: str, pattern: str, expected: bool) -> None:
    assert prepared_key.matches(path.split("/"), pattern.split("/")) is expected


def test_the_key_follows_the_key_files_and_nothing_else_of_the_tree(tmp_path: pathlib.Path) -> None:
    root = tree(tmp_path, {"requirements.txt": "attrs\n", "app.py": "print(1)\n"})
    first = prepared_key.cache_key(*KEY_ARGS, root, ["requirements*.txt"])
    (root / "app.py").write_text("print(2)\n")  # not a key file: same key
    assert prepared_key.cache_key(*KEY_ARGS, root, ["requirements*.txt"]) == first
    (root / "requirements.txt").write_text("attrs==23.1\n")
    assert prepared_key.cache_key(*KEY_ARGS, root, ["requirements*.txt"]) != first


@pytest.mark.parametrize(
    "changed",
    [
        ("https://git.example/other.git", "main", ["pip install -e ."], {"A": "1"}),
        ("https://git.example/app.git", "dev", ["pip install -e ."], {"A": "1"}),
        ("https://git.example/app.git", "main", ["pip install ."], {"A": "1"}),
        ("https://git.example/app.git", "main", ["pip install -e .", ""], {"A": "1"}),
        ("https://git.example/app.git", "main", ["pip install -e ."], {"A": "2"}),
        ("https://git.example/app.git", "main", ["pip install -e ."], {}),
    ],
)
def test_the_key_covers_repository_branch_setup_and_env(tmp_path: pathlib.Path, changed: tuple) -> None:
    root = tree(tmp_path, {"requirements.txt": "attrs\n"})
    assert prepared_key.cache_key(*changed, root, []) != prepared_key.cache_key(*KEY_ARGS, root, [])


def test_key_files_never_follow_a_symlink_out_of_the_tree(tmp_path: pathlib.Path) -> None:
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "requirements.txt").write_text("outside\n")
    root = tree(tmp_path, {"requirements.txt": "x\n"})
    (root / "requirements-link.txt").symlink_to(outside / "requirements.txt")
    (root / "linked").symlink_to(outside)
    found = list(prepared_key.key_files(root, ["requirements*.txt", "linked/*", "**/requirements.txt"]))
    assert found == ["requirements.txt"]
    before = prepared_key.cache_key(*KEY_ARGS, root, ["**/requirements*.txt"])
    (outside / "requirements.txt").write_text("changed outside\n")
    assert prepared_key.cache_key(*KEY_ARGS, root, ["**/requirements*.txt"]) == before


def test_patterns_leaving_the_tree_match_nothing(tmp_path: pathlib.Path) -> None:
    root = tree(tmp_path / "in", {"a.txt": "a"})
    (tmp_path / "b.txt").write_text("b")
    assert list(prepared_key.key_files(root, ["../b.txt", "/etc/passwd", "./a.txt", ""])) == []


def test_a_large_key_file_is_read_only_up_to_the_bound(tmp_path: pathlib.Path) -> None:
    root = tree(tmp_path, {})
    root.mkdir(parents=True, exist_ok=True)
    big = root / "uv.lock"
    with open(big, "wb") as f:
        f.write(b"a" * (prepared_key.MAX_FILE_BYTES + 10))
    first = prepared_key.cache_key(*KEY_ARGS, root, ["uv.lock"])
    with open(big, "r+b") as f:  # past the bound, same size: not read
        f.seek(prepared_key.MAX_FILE_BYTES + 5)
        f.write(b"b")
    assert prepared_key.cache_key(*KEY_ARGS, root, ["uv.lock"]) == first
    with open(big, "ab") as f:  # the size still counts
        f.write(b"c")
    assert prepared_key.cache_key(*KEY_ARGS, root, ["uv.lock"]) != first


KEY = "a" * 64


def prepared(tmp_path: pathlib.Path, name: str = "ws", size: int = 1000) -> pathlib.Path:
    root = tmp_path / name
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "tool").write_bytes(b"x" * size)
    (root / ".venv" / "bin" / "python").symlink_to("/usr/bin/python3")
    (root / "app.py").write_text("print(1)\n")
    return root


def test_a_stored_entry_is_found_whole(tmp_path: pathlib.Path) -> None:
    cache = PreparedCache(tmp_path / "cache", 1 << 20)
    source = prepared(tmp_path)
    stored = cache.store("app", KEY, source, "c0ffee", ["app.py"], str(source))
    assert stored is not None
    found = cache.lookup("app", KEY)
    assert found == stored and found.commit == "c0ffee" and found.tracked == ("app.py",)
    assert found.origin == str(source)
    assert (found.tree / ".venv" / "bin" / "tool").read_bytes() == b"x" * 1000
    assert os.readlink(found.tree / ".venv" / "bin" / "python") == "/usr/bin/python3"
    assert cache.lookup("other", KEY) is None
    assert cache.lookup("app", "b" * 64) is None
    assert oct((tmp_path / "cache").stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize(
    "damage",
    [
        lambda e: (e.tree / ".venv" / "bin" / "tool").write_bytes(b"y" * 10),  # another size
        lambda e: (e.tree / ".venv" / "bin" / "tool").unlink(),  # half-deleted
        lambda e: (e.tree / "extra").write_text("more"),
        lambda e: (e.path / prepared_cache.MARKER).unlink(),  # no marker: never completed
        lambda e: (e.path / prepared_cache.MARKER).write_text('{"key": '),  # a torn marker
        lambda e: os.utime(e.tree / "app.py", ns=(1, 1)),  # written in place since
    ],
)
def test_a_damaged_entry_is_never_used_and_is_removed(tmp_path: pathlib.Path, damage: object) -> None:
    cache = PreparedCache(tmp_path / "cache", 1 << 20)
    entry = cache.store("app", KEY, prepared(tmp_path), "c0ffee", [], "/ws")
    assert entry is not None
    damage(entry)  # type: ignore[operator]
    assert cache.lookup("app", KEY) is None
    assert not entry.path.exists()


def test_a_half_written_entry_is_invisible_and_swept(tmp_path: pathlib.Path) -> None:
    cache = PreparedCache(tmp_path / "cache", 1 << 20)
    half = cache.project_dir("app") / f"{prepared_cache.NEW}{KEY[:16]}-x"
    (half / prepared_cache.TREE).mkdir(parents=True)
    assert cache.lookup("app", KEY) is None
    cache.sweep(older_than=0)
    assert not half.exists()


def test_least_recently_used_entries_go_first_and_held_ones_stay(tmp_path: pathlib.Path) -> None:
    cache = PreparedCache(tmp_path / "cache", 2500)
    keys = ["1" * 64, "2" * 64, "3" * 64]
    for i, key in enumerate(keys[:2]):
        assert cache.store("app", key, prepared(tmp_path, f"ws{i}"), "c", [], "/ws") is not None
        os.utime(cache.project_dir("app") / key / prepared_cache.MARKER, (1000 + i, 1000 + i))
    first = cache.lookup("app", keys[0])  # used now: the second is the least recent
    assert first is not None
    assert cache.store("app", keys[2], prepared(tmp_path, "ws2"), "c", [], "/ws") is not None
    assert cache.lookup("app", keys[1]) is None
    assert cache.lookup("app", keys[0]) is not None and cache.lookup("app", keys[2]) is not None
    held = prepared_cache.hold(first)
    assert held is not None
    try:
        assert cache.store("app", "4" * 64, prepared(tmp_path, "ws3"), "c", [], "/ws") is not None
        assert cache.lookup("app", keys[0]) is not None  # held by a run: kept, the other went
        assert cache.lookup("app", keys[2]) is None
    finally:
        os.close(held)
    assert cache.used_bytes() <= 2500 + 1100


def test_a_tree_larger_than_the_cache_is_not_kept(tmp_path: pathlib.Path) -> None:
    cache = PreparedCache(tmp_path / "cache", 500)
    assert cache.store("app", KEY, prepared(tmp_path, size=1000), "c", [], "/ws") is None
    assert cache.lookup("app", KEY) is None
    assert list(cache.project_dir("app").iterdir()) == []


def test_an_odd_project_name_gets_a_directory_of_its_own(tmp_path: pathlib.Path) -> None:
    cache = PreparedCache(tmp_path / "cache", 1 << 20)
    for name in ("../etc", ".hidden", "a/b", ""):
        path = cache.project_dir(name)
        assert path.parent == tmp_path / "cache" and path.name.startswith("~")
    assert cache.project_dir("my-app_1.0").name == "my-app_1.0"
