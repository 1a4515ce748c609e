"""Small asyncio helpers every async shell of the package shares: ending a task, bounded.

They wait with `asyncio.wait` and a timeout, which never cancels the waiting task and never
swallows its cancellation, and not with ``asyncio.wait_for`` or ``asyncio.timeout``, because
of two faults of Python 3.11 that bite on clean-up paths (``aclose``, ``__aexit__``,
``finally:``), where the task may already be being cancelled:

- ``asyncio.wait_for`` returns normally when the waiting task is cancelled in the moment the
  awaited thing completes (CPython gh-86296, fixed in 3.12): the cancellation is lost, and a
  loop that should have ended goes on.
- ``asyncio.timeout`` before 3.11.3 (Debian bookworm's 3.11.2, what a 32-bit Raspberry Pi
  runs) raises its expiry as `asyncio.CancelledError` instead of `TimeoutError` in a task
  that is already being cancelled, so an ``except TimeoutError:`` clean-up is skipped.
"""

from __future__ import annotations

import asyncio

import structlog

__all__ = ["CANCEL_TIMEOUT_S", "cancel_and_wait", "wait_or_cancel"]

log = structlog.get_logger("edge_runtime.aio")

CANCEL_TIMEOUT_S = 15.0
"""Seconds `cancel_and_wait` gives a cancelled task's clean-up, once per cancellation sent
(two at most): more than a command source's worst case (``kill_timeout_s`` 5 s after
SIGTERM, 5 s after SIGKILL, 1 s for the stderr pipe)."""


async def cancel_and_wait(task: asyncio.Task[object], timeout_s: float = CANCEL_TIMEOUT_S) -> bool:
    """Cancel ``task`` (if it is still running) and wait until it has ended, bounded.

    The task gets ``timeout_s`` seconds to end after the cancellation. A task still running
    then has swallowed it (e.g. gh-86296 inside it) or is stuck in its clean-up: it is
    cancelled once more and gets ``timeout_s`` seconds again; after that it is left running,
    with a warning ``task_ignored_cancellation`` logged. So this returns within about
    ``2 * timeout_s`` seconds, whatever the task does.

    If the caller itself is cancelled while it waits, the cancellation is passed on to
    ``task`` at once (as ``await task`` would), the wait continues within the same bound,
    and `asyncio.CancelledError` is raised at the end: a cancellation of the caller is never
    lost, and never leaves the task unwaited before the bound.

    Parameters
    ----------
    task : asyncio.Task
        The task to end; not the caller's own.
    timeout_s : float
        Seconds to wait after each of the (at most two) cancellations; default
        `CANCEL_TIMEOUT_S`.

    Returns
    -------
    bool
        Whether the task has ended (False only after the warning).

    Raises
    ------
    asyncio.CancelledError
        Only when the caller itself was cancelled while it waited (chained to the exception
        the task ended with, if any).
    BaseException
        Otherwise the exception the task ended with, other than its own cancellation (as
        ``await task`` would raise it).
    """
    loop = asyncio.get_running_loop()
    caller_cancelled = False
    for _ in range(2):  # the cancellation, then once more for a task that swallowed it
        if task.done():
            break
        task.cancel()
        deadline = loop.time() + timeout_s
        # bounded: each pass either ends the wait, reaches the deadline or takes one of the
        # caller's cancellations, which it passes on to the task
        while not task.done() and (remaining := deadline - loop.time()) > 0:
            try:
                await asyncio.wait([task], timeout=remaining)
            except asyncio.CancelledError:
                caller_cancelled = True
                task.cancel()
    ended = task.done()
    if not ended:
        log.warning(
            "task_ignored_cancellation", task=task.get_name(), waited_s=round(2 * timeout_s, 3)
        )
    error = task.exception() if ended and not task.cancelled() else None
    if caller_cancelled:
        raise asyncio.CancelledError from error
    if error is not None:
        raise error
    return ended


async def wait_or_cancel(
    task: asyncio.Task[object], timeout_s: float, cancel_timeout_s: float = CANCEL_TIMEOUT_S
) -> bool:
    """Wait up to ``timeout_s`` seconds for ``task`` to end on its own, then
    `cancel_and_wait` it (with ``cancel_timeout_s``).

    A graceful stop (ask the task to finish, e.g. by setting its stop event, then call
    this) that a cancellation of the caller can neither lose nor cut short: if the caller
    is cancelled while it waits, ``task`` is cancelled and waited for (bounded), then
    `asyncio.CancelledError` is raised.

    Returns
    -------
    bool
        Whether the task ended on its own within ``timeout_s``; False when it had to be
        cancelled (or ignored the cancellation, see `cancel_and_wait`).

    Raises
    ------
    asyncio.CancelledError
        Only when the caller itself was cancelled while it waited.
    BaseException
        The exception the task ended with, other than a cancellation (as ``await task``
        would raise it).
    """
    try:
        if not task.done():
            await asyncio.wait([task], timeout=timeout_s)
    except asyncio.CancelledError:
        await cancel_and_wait(task, cancel_timeout_s)
        raise
    if task.done():
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
        return not task.cancelled()
    await cancel_and_wait(task, cancel_timeout_s)
    return False
