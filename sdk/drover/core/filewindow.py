"""What read_file shows the model: a window of a file, cut at a line boundary.

A read returns at most `limit` characters of the file. When the file goes on, a note on
its own line names the line to read from next, so a model can page through a large file
with from_line and see every line exactly once.
"""

from __future__ import annotations

READ_LIMIT = 40_000
"""Characters of file text one read_file call returns at most (the note comes on top)."""


def file_lines(text: str) -> list[str]:
    """The lines of `text`, each keeping its "\\n"; only "\\n" ends a line, so line numbers
    agree with editors and `git diff` (a lone "\\r" or form feed stays inside its line)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def continuation_note(next_line: int) -> str:
    """The note that ends a window when the file goes on at `next_line`."""
    return f"[truncated: the file continues at line {next_line}; call read_file with from_line={next_line}]"


def file_window(text: str, from_line: int = 1, limit: int = READ_LIMIT) -> str:
    """At most `limit` characters of `text` from line `from_line` (1-based), cut at a line
    boundary, then a continuation note on its own line when the file goes on.

    A single line longer than `limit` is cut at `limit` characters and the note says so; the
    next read starts at the line after it. A `from_line` past the end, or below 1, answers
    with a note instead of text. An empty file read from line 1 is "".
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    if from_line < 1:
        return f"[from_line must be 1 or more, not {from_line}]"
    lines = file_lines(text)
    if from_line > len(lines):
        if from_line == 1:  # an empty file read from the start is just empty
            return ""
        return f"[line {from_line} is past the end: the file has {_plural(len(lines), 'line')}]"

    first = lines[from_line - 1]
    if len(first) > limit:
        # Cutting mid-line is the only way to show anything; say how much was left out.
        shown = first[:limit]
        after = from_line + 1
        if after > len(lines):
            tail = "it is the last line of the file"
        else:
            tail = f"the file continues at line {after}; call read_file with from_line={after}"
        # len(first) counts the newline, so a line of exactly `limit` characters plus its
        # newline reads "cut after 40000 of its 40001 characters": nothing visible is lost.
        return f"{shown}\n[truncated: line {from_line} is cut after {limit} of its {len(first)} characters; {tail}]"

    window: list[str] = []
    used = 0
    for number in range(from_line, len(lines) + 1):
        line = lines[number - 1]
        if used + len(line) > limit:
            # Every line before this one ends with "\n", so the note starts its own line.
            return "".join(window) + continuation_note(number)
        window.append(line)
        used += len(line)
    return "".join(window)
