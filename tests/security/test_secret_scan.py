"""The at-rest secret scan the security tests use reads sparse images without running out of memory and misses
nothing: a needle in a 32 GiB sparse file, and one split across two of its read chunks, are found."""

from __future__ import annotations

import pathlib

from tests.secrets_at_rest import CHUNK, file_holds, files_holding

NEEDLE = b"sk-ant-secret-0123456789"


def sparse(path: pathlib.Path, at: int, data: bytes = NEEDLE) -> pathlib.Path:
    with open(path, "wb") as file:
        file.truncate(32 << 30)
        file.seek(at)
        file.write(data)
    return path


def test_a_needle_deep_in_a_sparse_image_is_found_and_a_clean_one_is_not(tmp_path: pathlib.Path) -> None:
    (tmp_path / "spares").mkdir()
    dirty = sparse(tmp_path / "spares" / "a.disk", 20 << 30)
    clean = sparse(tmp_path / "spares" / "b.disk", 20 << 30, b"x" * len(NEEDLE))
    assert file_holds(dirty, [NEEDLE]) and not file_holds(clean, [NEEDLE])
    assert files_holding(tmp_path, [b"nothing", NEEDLE]) == [str(dirty)]


def test_a_needle_split_across_two_chunks_is_found(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "split.bin"
    path.write_bytes(b"a" * (CHUNK - 5) + NEEDLE + b"b" * CHUNK)
    assert file_holds(path, [NEEDLE]) and not file_holds(path, [NEEDLE + b"!"])
