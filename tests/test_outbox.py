"""agentd/outbox.py: a run's messages are numbered, kept on disk and dropped only when acked."""

from __future__ import annotations

import json
import pathlib

from agentd.outbox import RunOutbox


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
