"""Cancellation of one agent's turn: a signal that every wait of the turn races against.

`CancelSignal.race(awaitable)` returns the awaitable's result, or — when `fire()` comes first —
cancels it (letting it clean up: close its HTTP stream, kill its process group) and raises
`TurnCancelled`. `fire` and `call_soon` may be called from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class TurnCancelled(Exception):
    """The person cancelled the turn."""


class CancelSignal:
    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def arm(self) -> None:
        """Start of a turn: bind to the running loop, clear an old signal."""
        self._loop = asyncio.get_running_loop()
        self._event.clear()

    def call_soon(self, action: Callable[[], None]) -> None:
        """Run `action` in the turn's loop (directly when already in it)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            action()
        else:
            loop.call_soon_threadsafe(action)

    def fire(self) -> None:
        self.call_soon(self._event.set)

    async def race(self, awaitable: Awaitable[T]) -> T:
        task = asyncio.ensure_future(awaitable)
        waiter = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task  # lets the task clean up (close the stream, kill the group)
        if task.cancelled():
            raise TurnCancelled
        return task.result()
