"""`cancel_and_wait` and `wait_or_cancel`: the task ends (or is given up on, bounded), its
cancellation is swallowed, the caller's is never lost, also when it lands in the moment the
awaited task completes (where Python 3.11's ``asyncio.wait_for`` loses it, gh-86296)."""

from __future__ import annotations

import asyncio

import pytest
import structlog

from edge_runtime.aio import cancel_and_wait, wait_or_cancel

STEP_S = 5.0  # bound of every wait that should end at once
STEPS = 12  # loop iterations a cancellation is moved through


async def steps(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def stubborn(swallow: int, released: asyncio.Event) -> str:
    """Swallows its first ``swallow`` cancellations, then ends cancelled at the next one (or
    returns once ``released`` is set)."""
    swallowed = 0
    while True:  # bounded: each pass takes a cancellation or ends
        try:
            await released.wait()
            return "released"
        except asyncio.CancelledError:
            swallowed += 1
            if swallowed > swallow:
                raise


async def test_a_running_task_is_cancelled_and_awaited_without_raising() -> None:
    task = asyncio.create_task(asyncio.sleep(30))
    await asyncio.sleep(0)
    async with asyncio.timeout(STEP_S):
        assert await cancel_and_wait(task) is True
    assert task.cancelled()


async def test_an_exception_the_task_ended_with_is_raised() -> None:
    async def fail() -> None:
        raise OSError("port gone")

    task = asyncio.create_task(fail())
    await asyncio.sleep(0)
    with pytest.raises(OSError, match="port gone"):
        await cancel_and_wait(task)


async def test_a_task_that_swallows_one_cancellation_is_cancelled_again_and_ends() -> None:
    task = asyncio.create_task(stubborn(1, asyncio.Event()))
    await asyncio.sleep(0)
    with structlog.testing.capture_logs() as logs:
        async with asyncio.timeout(STEP_S):
            assert await cancel_and_wait(task, timeout_s=0.05) is True
    assert task.cancelled()
    assert logs == []


async def test_a_task_that_swallows_every_cancellation_is_given_up_on_with_a_warning() -> None:
    released = asyncio.Event()
    task = asyncio.create_task(stubborn(10**9, released), name="deaf")
    await asyncio.sleep(0)
    with structlog.testing.capture_logs() as logs:
        async with asyncio.timeout(STEP_S):
            assert await cancel_and_wait(task, timeout_s=0.05) is False
    assert not task.done()
    assert [(e["event"], e["log_level"], e["task"]) for e in logs] == [
        ("task_ignored_cancellation", "warning", "deaf")
    ]
    released.set()
    assert await task == "released"


async def test_a_cancellation_of_the_caller_while_it_waits_is_not_lost() -> None:
    # The caller is cancelled at each of its first loop iterations in turn while the task
    # ignores its first cancellation: the caller's cancel reaches the task (which then ends)
    # and the caller ends cancelled, well before the bound.
    # (After 0 iterations the caller is cancelled before it starts: it never touches the task.)
    for hops in range(STEPS):
        released = asyncio.Event()
        inner = asyncio.create_task(stubborn(1, released))
        await asyncio.sleep(0)
        outer = asyncio.create_task(cancel_and_wait(inner, timeout_s=30.0))
        await steps(hops)
        requested = outer.cancel()
        try:
            async with asyncio.timeout(STEP_S):
                await asyncio.wait([outer])
            assert inner.done() or hops == 0, hops
            assert outer.cancelled() or not requested, hops
        finally:
            released.set()
            await asyncio.wait([inner])


async def test_a_caller_already_being_cancelled_still_gets_the_bounded_wait() -> None:
    # A clean-up in a task that is already being cancelled: the wait must end by its bound
    # with the warning, not raise a cancellation (as asyncio.timeout's expiry does there on
    # Python 3.11.2) nor hang.
    released = asyncio.Event()
    deaf = asyncio.create_task(stubborn(10**9, released))
    outcome: list[object] = []

    async def cleaning_up() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            outcome.append(await cancel_and_wait(deaf, timeout_s=0.05))
            raise

    caller = asyncio.create_task(cleaning_up())
    await asyncio.sleep(0)
    caller.cancel()
    with structlog.testing.capture_logs():
        async with asyncio.timeout(STEP_S):
            await asyncio.wait([caller])
    assert caller.cancelled() and outcome == [False]
    released.set()
    await deaf


async def test_an_exception_of_the_task_is_chained_to_a_cancellation_of_the_caller() -> None:
    async def fail_when_cancelled() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            raise OSError("close failed") from None

    inner = asyncio.create_task(fail_when_cancelled())
    seen: list[BaseException] = []

    async def caller() -> None:
        try:
            await cancel_and_wait(inner)
        except asyncio.CancelledError as exc:
            seen.append(exc)
            raise

    await asyncio.sleep(0)
    outer = asyncio.create_task(caller())
    await asyncio.sleep(0)
    outer.cancel()
    async with asyncio.timeout(STEP_S):
        await asyncio.wait([outer])
    assert outer.cancelled()
    assert isinstance(seen[0].__cause__, OSError)
    assert isinstance(inner.exception(), OSError)


async def test_a_task_that_ends_on_its_own_is_waited_for_and_not_cancelled() -> None:
    stop = asyncio.Event()

    async def worker() -> str:
        await stop.wait()
        return "done"

    task = asyncio.create_task(worker())
    await asyncio.sleep(0)
    stop.set()
    async with asyncio.timeout(STEP_S):
        assert await wait_or_cancel(task, STEP_S) is True
    assert task.result() == "done"


async def test_a_task_that_does_not_end_in_time_is_cancelled() -> None:
    task = asyncio.create_task(asyncio.sleep(30))
    async with asyncio.timeout(STEP_S):
        assert await wait_or_cancel(task, 0.01) is False
    assert task.cancelled()


async def test_an_exception_of_a_task_that_ends_on_its_own_is_raised() -> None:
    async def fail() -> None:
        await asyncio.sleep(0)
        raise OSError("port gone")

    task = asyncio.create_task(fail())
    with pytest.raises(OSError, match="port gone"):
        await wait_or_cancel(task, STEP_S)


async def test_a_cancellation_landing_as_the_awaited_task_completes_is_never_lost() -> None:
    # The task completes after a few loop iterations, and the caller is cancelled at each
    # of its first iterations in turn, so once in the very moment the task completes:
    # whenever the cancel was requested before the caller ended, it must end cancelled.
    # Python 3.11's asyncio.wait_for returns the task's result instead (gh-86296).
    lost = []
    for hops in range(STEPS):
        task = asyncio.create_task(steps(3))
        caller = asyncio.create_task(wait_or_cancel(task, STEP_S))
        await steps(hops)
        requested = caller.cancel()
        async with asyncio.timeout(STEP_S):
            await asyncio.wait([caller, task], return_when=asyncio.ALL_COMPLETED)
        if requested and not caller.cancelled():
            lost.append(hops)
    assert lost == [], f"cancellation lost when it came after {lost} loop iterations"


async def test_a_graceful_stop_from_a_task_being_cancelled_still_cancels_a_late_task() -> None:
    # The clean-up of a task already being cancelled (leaving ``async with`` on
    # cancellation): the task it stops does not end in time, so it must be cancelled. With
    # asyncio.timeout, Python 3.11.2 raised the expiry as a cancellation there instead, and
    # the late task was left running.
    late = asyncio.create_task(asyncio.sleep(30))
    outcome: list[object] = []

    async def cleaning_up() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            outcome.append(await wait_or_cancel(late, 0.01))
            raise

    caller = asyncio.create_task(cleaning_up())
    await asyncio.sleep(0)
    caller.cancel()
    async with asyncio.timeout(STEP_S):
        await asyncio.wait([caller])
    assert caller.cancelled() and outcome == [False] and late.cancelled()
