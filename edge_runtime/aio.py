"""Small asyncio helpers every async shell of the package shares."""

from __future__ import annotations

import asyncio

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(task: asyncio.Task[object]) -> None:
    """Cancel ``task`` (if it is still running) and wait until it has ended.

    The task's own `asyncio.CancelledError` is swallowed; an exception the task ended with
    is raised here, as ``await task`` would.

    Raises
    ------
    asyncio.CancelledError
        Only when the caller itself is being cancelled while it waits (so a cancellation
        of the caller is never lost).
    """
    if not task.done():
        task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
