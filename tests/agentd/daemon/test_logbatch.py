"""agentd/daemon/logbatch.py: output is batched per stream, at a stream change, at 256 KiB and every 200 ms
(the size tests use 16 KiB batches)."""

from __future__ import annotations

import random

import pytest

from agentd.daemon.logbatch import RECORD_BYTES, LogBatcher

KIB = 1024


class Recorder:
    """Collects what the batcher sends, and feeds it records with their running output offset."""

    def __init__(self, **options: float) -> None:
        options.setdefault("max_bytes", 16 * KIB)
        self.sent: list[tuple[str, str, int]] = []
        self.batcher = LogBatcher(lambda stream, text, end: self.sent.append((stream, text, end)), **options)
        self.offset = 0

    def add(self, stream: str, text: str, now: float = 0.0) -> int:
        self.offset += len(text.encode())
        self.batcher.add(stream, text, self.offset, now)
        return self.offset


def test_defaults_are_200_ms_and_256_kib() -> None:
    batcher = LogBatcher(lambda *_: None)
    assert (batcher.interval, batcher.max_bytes) == (0.2, 256 * KIB)


def test_records_of_one_stream_wait_in_one_batch() -> None:
    rec = Recorder()
    rec.add("stdout", "one\n")
    end = rec.add("stdout", "two\n", now=0.1)
    assert rec.sent == []
    rec.batcher.flush()
    assert rec.sent == [("stdout", "one\ntwo\n", end)]


def test_a_stream_change_sends_the_batch_of_the_previous_stream() -> None:
    rec = Recorder()
    rec.add("stdout", "a\n")
    end_out = rec.add("stdout", "b\n")
    rec.add("stderr", "oops\n")
    assert rec.sent == [("stdout", "a\nb\n", end_out)]
    end_err = rec.add("stderr", "again\n")
    end_last = rec.add("stdout", "c\n")
    rec.batcher.flush()
    assert rec.sent == [
        ("stdout", "a\nb\n", end_out),
        ("stderr", "oops\nagain\n", end_err),
        ("stdout", "c\n", end_last),
    ]


def test_a_batch_is_sent_when_it_reaches_max_bytes() -> None:
    rec = Recorder()
    rec.add("stdout", "x" * (8 * KIB))
    assert rec.sent == []
    end = rec.add("stdout", "y" * (8 * KIB))
    assert rec.sent == [("stdout", "x" * (8 * KIB) + "y" * (8 * KIB), end)]


def test_a_record_that_would_overflow_starts_the_next_batch() -> None:
    rec = Recorder()
    first = rec.add("stdout", "x" * (12 * KIB))
    rec.add("stdout", "y" * (6 * KIB))
    assert rec.sent == [("stdout", "x" * (12 * KIB), first)]
    assert rec.batcher.due(0.0) is False
    last = rec.add("stdout", "z")
    rec.batcher.flush()
    assert rec.sent[1] == ("stdout", "y" * (6 * KIB) + "z", last)


def test_size_counts_utf8_bytes_not_characters() -> None:
    rec = Recorder(max_bytes=8)
    end = rec.add("stdout", "ééé")  # 6 bytes
    assert rec.sent == []
    rec.add("stdout", "éé")  # 4 more bytes would make 10 > 8
    assert rec.sent == [("stdout", "ééé", end)]


@pytest.mark.parametrize("now, due", [(0.0, False), (0.199, False), (0.2, True), (5.0, True)])
def test_due_200_ms_after_the_first_record_of_the_batch(now: float, due: bool) -> None:
    rec = Recorder()
    rec.add("stdout", "first\n", now=0.0)
    rec.add("stdout", "later\n", now=0.15)  # a later record does not postpone the batch
    assert rec.batcher.due(now) is due


def test_an_empty_batcher_is_never_due() -> None:
    rec = Recorder()
    assert rec.batcher.due(100.0) is False
    rec.add("stdout", "x", now=1.0)
    rec.batcher.flush()
    assert rec.batcher.due(100.0) is False
    rec.batcher.flush()  # nothing to send
    assert len(rec.sent) == 1


def test_the_interval_restarts_with_each_batch() -> None:
    rec = Recorder()
    rec.add("stdout", "a", now=0.0)
    rec.add("stderr", "b", now=0.5)  # sends the stdout batch; the stderr batch starts at 0.5
    assert rec.batcher.due(0.6) is False
    assert rec.batcher.due(0.75) is True
    rec.batcher.flush()
    assert [stream for stream, _, _ in rec.sent] == ["stdout", "stderr"]


def test_batches_cover_the_output_exactly_and_stay_within_max_bytes() -> None:
    rng = random.Random(3)
    rec = Recorder()
    records: list[tuple[str, str, int]] = []
    now = 0.0
    for _ in range(400):
        stream = rng.choice(["stdout", "stdout", "stdout", "stderr"])
        size = rng.choice([1, 100, 2000, RECORD_BYTES // 2, RECORD_BYTES])
        text = rng.choice("ab€") * (size // 3 or 1)  # up to 3 bytes a character, never over RECORD_BYTES
        assert len(text.encode()) <= RECORD_BYTES
        records.append((stream, text, rec.add(stream, text, now)))
        now += rng.choice([0.0, 0.05, 0.3])
        if rec.batcher.due(now):
            rec.batcher.flush()
    rec.batcher.flush()

    assert all(len(text.encode()) <= rec.batcher.max_bytes for _, text, _ in rec.sent)
    # Each batch is a run of whole records of one stream, and its end is the end of its last record.
    remaining = list(records)
    for stream, text, end in rec.sent:
        included = []
        while remaining and remaining[0][2] <= end:
            included.append(remaining.pop(0))
        assert included and included[-1][2] == end
        assert {s for s, _, _ in included} == {stream}
        assert "".join(t for _, t, _ in included) == text
    assert remaining == [], "every record was sent"
