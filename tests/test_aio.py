"""`cancel_and_wait`: the task ends, its cancellation is swallowed, the caller's is not."""

from __future__ import annotations

import asyncio

import pytest

from edge_runtime.aio import cancel_and_wait


async def test_a_running_task_is_cancelled_and_awaited_without_raising() -> None:
    task = asyncio.create_task(asyncio.sleep(30))
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task), timeout=5)
    assert task.cancelled()


async def test_an_exception_the_task_ended_with_is_raised() -> None:
    async def fail() -> None:
        raise OSError("port gone")

    task = asyncio.create_task(fail())
    await asyncio.sleep(0)
    with pytest.raises(OSError, match="port gone"):
        await cancel_and_wait(task)


async def test_a_cancellation_of_the_caller_while_it_waits_is_not_lost() -> None:
    async def stubborn() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(30)  # ignores the first cancel for a while

    inner = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    outer = asyncio.create_task(cancel_and_wait(inner))
    await asyncio.sleep(0.05)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(outer, timeout=5)
    inner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await inner
