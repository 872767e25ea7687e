"""agentd/daemon/outbox.py: a run's messages are numbered, kept on disk and dropped only when acked."""

from __future__ import annotations

import errno
import json
import os
import pathlib
from collections.abc import Callable

import pytest

from agentd.daemon.outbox import RunOutbox, SpoolFull


def seqs(box: RunOutbox) -> list[int]:
    return [m["seq"] for m in box.pending]


def lines(box: RunOutbox) -> list[dict]:
    return [json.loads(line) for line in box.path.read_text().splitlines()]


def test_a_new_outbox_is_empty(tmp_path: pathlib.Path) -> None:
    box = RunOutbox(tmp_path)
    assert (box.pending, box.last_seq, box.end, box.acked, box.finished) == ([], 0, 0, 0, False)
    assert not box.delivered


def test_append_numbers_messages_from_1(tmp_path: pathlib.Path) -> None:
    box = RunOutbox(tmp_path)
    first = box.append("started")
    second = box.append("log", end=120, stream="stdout", text="hello\n")
    assert first == {"seq": 1, "kind": "started"}
    assert second == {"seq": 2, "kind": "log", "end": 120, "stream": "stdout", "text": "hello\n"}
    assert seqs(box) == [1, 2]
    assert (box.last_seq, box.end) == (2, 120)
    assert lines(box) == [first, second]


def test_a_new_outbox_on_the_same_dir_resumes(tmp_path: pathlib.Path) -> None:
    box = RunOutbox(tmp_path)
    box.append("started")
    box.append("log", end=50, stream="stdout", text="é\n")
    box.append("log", end=90, stream="stderr", text="warn\n")
    box.append("finished", status="succeeded", exit_code=0)

    again = RunOutbox(tmp_path)
    assert again.pending == box.pending
    assert (again.last_seq, again.end, again.finished) == (4, 90, True)
    assert again.append("log", end=100)["seq"] == 5, "numbering continues after a restart"


def test_ack_removes_pending_messages_and_persists(tmp_path: pathlib.Path) -> None:
    box = RunOutbox(tmp_path)
    for i in range(1, 5):
        box.append("log", end=i * 10, text=f"line {i}\n")
    box.ack(2)
    assert seqs(box) == [3, 4]
    assert (tmp_path / "acked").read_text() == "2"
    box.ack(1)  # an old ack changes nothing
    assert (box.acked, seqs(box)) == (2, [3, 4])

    again = RunOutbox(tmp_path)
    assert (again.acked, seqs(again), again.last_seq, again.end) == (2, [3, 4], 4, 40)


def test_an_ack_beyond_the_last_message_acks_only_what_exists(tmp_path: pathlib.Path) -> None:
    box = RunOutbox(tmp_path)
    box.append("started")
    box.ack(7)
    assert (box.acked, box.pending) == (1, [])
    assert box.append("log")["seq"] == 2
    assert seqs(box) == [2], "a message appended later is still pending"


def test_a_torn_last_line_is_discarded_and_truncated(tmp_path: pathlib.Path) -> None:
    box = RunOutbox(tmp_path)
    box.append("started")
    box.append("log", end=10, text="whole\n")
    whole = box.path.read_bytes()
    with open(box.path, "ab") as f:
        f.write(b'{"seq": 3, "kind": "log", "end": 99, "te')  # a crash mid-write

    again = RunOutbox(tmp_path)
    assert (seqs(again), again.last_seq, again.end) == ([1, 2], 2, 10)
    assert again.path.read_bytes() == whole, "the torn line is cut from the file"
    assert again.append("log", end=20, text="next\n")["seq"] == 3
    assert [m["seq"] for m in lines(again)] == [1, 2, 3]
    assert seqs(RunOutbox(tmp_path)) == [1, 2, 3]


def test_an_ack_of_a_huge_seq_acks_everything(tmp_path: pathlib.Path) -> None:
    box = RunOutbox(tmp_path)
    for _ in range(3):
        box.append("log")
    box.ack(1 << 62)
    assert (box.acked, box.pending) == (3, [])
    assert RunOutbox(tmp_path).pending == []


def test_delivered_once_the_result_is_acked(tmp_path: pathlib.Path) -> None:
    box = RunOutbox(tmp_path)
    box.append("started")
    box.ack(1)
    assert not box.delivered, "acked but not finished"
    box.append("finished", status="failed", exit_code=3)
    assert box.finished and not box.delivered, "finished but not acked"
    box.ack(2)
    assert box.delivered
    assert RunOutbox(tmp_path).delivered


def fill(path: pathlib.Path) -> None:
    """Write `path` until its filesystem is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as err:
        assert err.errno == errno.ENOSPC
    finally:
        os.close(fd)


@pytest.fixture
def full_disk(small_disk: Callable[[pathlib.Path, str], pathlib.Path], tmp_path: pathlib.Path) -> pathlib.Path:
    """A run dir on a real 64 KiB filesystem; fill(disk / "filler") fills it."""
    run_dir = small_disk(tmp_path / "disk", "64k") / "run"
    run_dir.mkdir()
    return run_dir


def test_an_append_on_a_full_disk_stores_nothing_and_the_outbox_goes_on_once_there_is_room(
    full_disk: pathlib.Path,
) -> None:
    box = RunOutbox(full_disk)
    box.append("started", end=0)
    stored = box.path.read_bytes()
    fill(full_disk.parent / "filler")
    with pytest.raises(SpoolFull):
        box.append("log", end=9000, stream="stdout", text="x" * 9000)  # more than the page left
    assert box.path.read_bytes() == stored, "no half message is left behind"
    assert (box.last_seq, box.end, seqs(box)) == (1, 0, [1])

    (full_disk.parent / "filler").unlink()
    assert box.append("log", end=5, stream="stdout", text="room\n")["seq"] == 2
    again = RunOutbox(full_disk)
    assert (seqs(again), again.end) == ([1, 2], 5)


def test_an_ack_that_cannot_be_stored_is_kept_in_memory(full_disk: pathlib.Path) -> None:
    box = RunOutbox(full_disk)
    for i in range(3):
        box.append("log", end=i, text="x")
    fill(full_disk.parent / "filler")
    box.ack(2)  # no room for the acked file: agentd goes on
    assert (box.acked, seqs(box)) == (2, [3])
    assert sorted(p.name for p in full_disk.iterdir()) == ["outbox.jsonl"]
    assert seqs(RunOutbox(full_disk)) == [1, 2, 3], "after a restart the unstored ack is simply sent again"


def test_a_damaged_outbox_and_acked_file_never_stop_a_restart(tmp_path: pathlib.Path) -> None:
    box = RunOutbox(tmp_path)
    box.append("started", end=0)
    box.append("log", end=10, text="whole\n")
    whole = box.path.read_bytes()
    with open(box.path, "ab") as f:
        # A line torn by a full disk with a later line written after it, then one out of sequence.
        f.write(b'{"seq": 3, "kind": "log", "te{"seq": 3, "kind": "log", "end": 20, "text": "x"}\n')
        f.write(b'{"seq": 9, "kind": "log", "end": 30, "text": "y"}\n')
    (tmp_path / "acked").write_bytes(b"\x00\x00\x00")

    again = RunOutbox(tmp_path)
    assert (seqs(again), again.acked, again.last_seq, again.end) == ([1, 2], 0, 2, 10)
    assert again.path.read_bytes() == whole
    assert again.append("log", end=20, text="next\n")["seq"] == 3
    assert seqs(RunOutbox(tmp_path)) == [1, 2, 3]
