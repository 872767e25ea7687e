"""Root reads a run's files without following what the run made: symlinks, FIFOs, huge files."""

from __future__ import annotations

import os
import pathlib

from agentd.run.hostile import list_dir, read_regular


def test_a_regular_file_is_read(tmp_path: pathlib.Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "t.jsonl").write_bytes(b"line\n")
    assert read_regular(tmp_path, "a/b/t.jsonl") == b"line\n"
    assert list_dir(tmp_path, "a") == ["b"]


def test_symlinks_anywhere_on_the_path_are_not_followed(tmp_path: pathlib.Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("token")
    home = tmp_path / "home"
    (home / "real").mkdir(parents=True)
    (home / "real" / "leaf").symlink_to(secret)
    (home / "dirlink").symlink_to(tmp_path)
    assert read_regular(home, "real/leaf") is None
    assert read_regular(home, "dirlink/host-secret") is None
    assert list_dir(home, "dirlink") == []
    assert read_regular(home, "../host-secret") is None and read_regular(home, "/etc/passwd") is None


def test_fifos_and_files_past_the_limit_are_not_read(tmp_path: pathlib.Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "big").write_bytes(b"x" * 2048)
    assert read_regular(tmp_path, "pipe") is None  # and it did not block
    assert read_regular(tmp_path, "big", limit=1024) is None
    assert read_regular(tmp_path, "big", limit=4096) == b"x" * 2048
