"""CommandSource with real subprocesses: merged output, restart notices with backoff, stop."""

from __future__ import annotations

import asyncio
import contextlib

from specload.watch.command import CommandSource, ProcessExit
from tests.waiting import DEADLINE, pid_gone, until

CMD = 'bash -c "echo a; echo b >&2; exit 3"'


async def collect(src: CommandSource, n: int) -> list[str]:
    out: list[str] = []

    async def run() -> None:
        async with contextlib.aclosing(src.lines()) as it:
            async for line in it:
                out.append(line)
                if len(out) == n:
                    return

    await asyncio.wait_for(run(), DEADLINE)
    return out


async def test_merged_output_and_restart_with_backoff() -> None:
    notices: list[str] = []
    src = CommandSource(CMD, backoff=(0.01, 0.02), on_notice=notices.append)
    lines = await collect(src, 6)
    # stdout and stderr share one pipe, so the order the command wrote them in is kept.
    assert lines == ["a", "b"] * 3
    assert notices[:2] == [
        "log command exited with code 3, restarting in 0.01 s",
        "log command exited with code 3, restarting in 0.02 s",
    ]
    assert src.starts == 3
    assert src.last_exit == ProcessExit(3, None, "exited with code 3")
    await src.stop()


async def test_backoff_repeats_its_last_value() -> None:
    notices: list[str] = []
    src = CommandSource("exit 1", backoff=(0.01, 0.02), on_notice=notices.append)
    task = asyncio.create_task(collect(src, 1))  # the command prints nothing; we only watch notices
    await until(lambda: len(notices) >= 4)
    await src.stop()
    await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), DEADLINE)
    delays = [n.rsplit(" in ", 1)[1] for n in notices[:4]]
    assert delays == ["0.01 s", "0.02 s", "0.02 s", "0.02 s"]


async def test_no_restart_ends_after_first_exit() -> None:
    notices: list[str] = []
    src = CommandSource(CMD, restart=False, on_notice=notices.append)
    lines = [line async for line in src.lines()]
    assert lines == ["a", "b"]
    assert notices == ["log command exited with code 3"]


async def test_partial_last_line_and_signal_exit_are_reported() -> None:
    notices: list[str] = []
    src = CommandSource("printf 'no newline'; kill -KILL $$", restart=False, on_notice=notices.append)
    lines = await asyncio.wait_for(_all(src), DEADLINE)
    assert lines == ["no newline"]
    assert src.last_exit is not None and src.last_exit.signal_name == "SIGKILL"
    assert notices == ["log command killed by SIGKILL"]


async def _all(src: CommandSource) -> list[str]:
    return [line async for line in src.lines()]


async def test_stop_kills_the_whole_process_group() -> None:
    # The shell starts a background child and reports both pids; stop() must end both.
    src = CommandSource("sleep 60 & echo $$ $!; wait", kill_grace=1.0)
    out: list[str] = []

    async def run() -> None:
        async for line in src.lines():
            out.append(line)

    task = asyncio.create_task(run())
    await until(lambda: bool(out))
    shell_pid, child_pid = (int(x) for x in out[0].split())
    await src.stop()
    await asyncio.wait_for(task, DEADLINE)
    await until(lambda: pid_gone(shell_pid) and pid_gone(child_pid))


async def test_closing_the_iterator_leaves_no_process_behind() -> None:
    src = CommandSource("echo $$; exec sleep 60")
    async with contextlib.aclosing(src.lines()) as it:
        pid = int(await asyncio.wait_for(it.__anext__(), DEADLINE))
    await until(lambda: pid_gone(pid))


async def test_a_flood_is_dropped_oldest_first_in_bounded_memory() -> None:
    # the loop examines lines slower than the command prints them: the queue stays under its cap and the
    # dropped lines are counted and noticed, instead of growing (800 MB in 40 s before)
    notices: list[str] = []
    src = CommandSource("yes 'INFO flood line of the log'", restart=False, on_notice=notices.append,
                        queue_bytes=64 << 10)
    seen = 0

    async def run() -> None:
        nonlocal seen
        async with contextlib.aclosing(src.lines()) as it:
            async for _ in it:
                seen += 1
                assert src.held_bytes <= 64 << 10
                if seen % 100 == 0:
                    await asyncio.sleep(0.001)  # a slow examiner
                if seen == 5000:
                    return

    await asyncio.wait_for(run(), 2 * DEADLINE)
    await src.stop()
    assert src.dropped_lines > 0
    assert any(n.startswith("log flood:") for n in notices)


async def test_output_without_newlines_is_cut_at_the_line_cap() -> None:
    src = CommandSource("head -c 2500000 /dev/zero", restart=False)
    lines = [line async for line in src.lines()]
    assert [len(x) for x in lines] == [1 << 20, 1 << 20, 2500000 - (2 << 20)]
    assert src.cut_lines == 2
