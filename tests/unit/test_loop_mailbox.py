"""engine/server_generation.py LoopMailbox: events posted on the engine thread reach their
queues on the event loop only after a flush, in order, and a flush wakes the loop once for
everything queued since the last delivery."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from engine.scheduler_events import Queued, RequestEvent
from engine.server_generation import LoopMailbox


def test_posts_wait_for_a_flush_and_arrive_in_order_with_one_wake() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        box = LoopMailbox(loop)
        a: asyncio.Queue[RequestEvent] = asyncio.Queue()
        b: asyncio.Queue[RequestEvent] = asyncio.Queue()
        wakes = 0
        real = loop.call_soon_threadsafe

        def counted(callback: Callable[[], object]) -> asyncio.Handle:
            nonlocal wakes
            wakes += 1
            return real(callback)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]

        def engine_thread() -> None:
            for i in range(3):
                box.post(a, Queued(i))
                box.post(b, Queued(10 + i))

        worker = threading.Thread(target=engine_thread)
        worker.start()
        worker.join()
        await asyncio.sleep(0.01)
        assert a.empty() and b.empty() and wakes == 0  # nothing before a flush

        def flush_twice() -> None:
            box.flush()
            box.flush()

        flusher = threading.Thread(target=flush_twice)
        flusher.start()
        flusher.join()
        await asyncio.sleep(0.01)
        assert wakes == 1  # the second flush found the delivery already on its way
        assert [a.get_nowait() for _ in range(3)] == [Queued(0), Queued(1), Queued(2)]
        assert [b.get_nowait() for _ in range(3)] == [Queued(10), Queued(11), Queued(12)]
        box.flush()  # nothing queued: no wake
        assert wakes == 1

    asyncio.run(main())
