"""The server log's tail for the screen is bounded by characters as well as lines: 2,000 lines of
1 MiB (the longest line the tailer passes) would otherwise hold 2 GB, and a frame carries each line
cut to what a panel can show."""

from __future__ import annotations

from specload.watch.logwatch import FRAME_LINE_CHARS, TAIL_CHARS, TAIL_LINES, LogTail


def test_long_lines_are_bounded_by_characters_newest_kept() -> None:
    tail = LogTail()
    big = "x" * (1 << 20)
    for seq in range(1, 41):
        tail.append((seq, big))
    assert tail.chars <= TAIL_CHARS and len(tail) == TAIL_CHARS // (1 << 20)
    assert [s for s, _ in tail] == list(range(41 - len(tail), 41))  # the newest, in order
    tail.append((41, "y" * (TAIL_CHARS + 5)))  # one line over the whole bound: still shown, alone
    assert [s for s, _ in tail] == [41] and tail.chars == TAIL_CHARS + 5


def test_short_lines_are_bounded_by_count_and_the_frame_cuts_lines() -> None:
    tail = LogTail()
    for seq in range(1, TAIL_LINES + 11):
        tail.append((seq, f"line {seq}"))
    assert len(tail) == TAIL_LINES and next(iter(tail))[0] == 11
    assert tail.chars == sum(len(line) for _, line in tail)
    tail.append((TAIL_LINES + 11, "z" * (FRAME_LINE_CHARS + 100)))
    frame = tail.tail(3)
    assert [s for s, _ in frame] == [TAIL_LINES + 9, TAIL_LINES + 10, TAIL_LINES + 11]
    assert frame[0][1] == f"line {TAIL_LINES + 9}"
    assert frame[-1][1] == "z" * FRAME_LINE_CHARS + "…"
