"""The bridge between the asyncio HTTP server and the engine thread, and token → text streaming.

`EngineBridge.events` submits a request to the scheduler and yields its events on the event
loop; leaving the iteration early (a client that disconnects, a stop string) cancels the request
at once, which frees the slot's rows for the next step. `TextAssembler` turns token ids into UTF-8
text deltas, holding back any tail that could be the start of a stop string.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from engine.scheduler import Scheduler
from engine.scheduler_events import Finished, GenerationRequest, Queued, RequestEvent, TokensOut


class LoopMailbox:
    """Events from the engine thread to queues on one event loop, delivered in batches. `post`
    only queues; `flush` wakes the loop (call_soon_threadsafe writes to its self-pipe) once for
    everything queued since. The scheduler flushes once its next step is running on the GPU
    (Scheduler.add_flush_hook): the loop then turns the tokens into SSE while the GPU works,
    instead of taking the interpreter from the engine thread between two steps. Each queue
    sees its events in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._pending: list[tuple[asyncio.Queue[RequestEvent], RequestEvent]] = []
        self._waking = False  # a delivery is scheduled on the loop and has not run yet

    def post(self, inbox: asyncio.Queue[RequestEvent], event: RequestEvent) -> None:
        """Engine thread: queue `event` for `inbox` until the next flush."""
        with self._lock:
            self._pending.append((inbox, event))

    def flush(self) -> None:
        """Engine thread: have the loop deliver what is queued."""
        with self._lock:
            if not self._pending or self._waking:
                return
            self._waking = True
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
            self.loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:  # event loop
        with self._lock:
            batch, self._pending, self._waking = self._pending, [], False
        for inbox, event in batch:
            inbox.put_nowait(event)


class EngineBridge:
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self._mailboxes: dict[asyncio.AbstractEventLoop, LoopMailbox] = {}
        scheduler.add_flush_hook(self._flush)

    def _flush(self) -> None:  # engine thread
        for box in list(self._mailboxes.values()):
            box.flush()

    def _mailbox(self, loop: asyncio.AbstractEventLoop) -> LoopMailbox:
        box = self._mailboxes.get(loop)
        if box is None:  # one per loop (tests run several servers, each on its own loop)
            live = {k: v for k, v in self._mailboxes.items() if not k.is_closed()}
            live[loop] = box = LoopMailbox(loop)
            self._mailboxes = live  # replaced whole: the engine thread iterates a snapshot
        return box

    async def events(self, request: GenerationRequest) -> AsyncIterator[RequestEvent]:
        inbox: asyncio.Queue[RequestEvent] = asyncio.Queue()
        post = self._mailbox(asyncio.get_running_loop()).post

        def sink(event: RequestEvent) -> None:  # engine thread
            post(inbox, event)

        finished = False
        self.scheduler.submit(request, sink)
        try:
            while not finished:
                event = await inbox.get()
                finished = isinstance(event, Finished)
                yield event
        finally:
            if not finished:
                self.scheduler.cancel(request.id)


def _held_tail(text: str, stops: Sequence[str]) -> int:
    """Length of the longest end of text that is a proper prefix of some stop string."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest


class TextAssembler:
    """Token ids → text deltas, cut at the first stop string."""

    def __init__(self, tokenizer: Any, stops: Sequence[str] = ()) -> None:
        self.tokenizer = tokenizer
        self.stops = [s for s in stops if s]
        self.stopped = False
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._held = ""

    def push(self, tokens: Sequence[int]) -> str:
        if self.stopped:
            return ""
        data = b"".join(self.tokenizer.token_bytes(int(t)) for t in tokens)
        text = self._held + self._decoder.decode(data)
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped, self._held = True, ""
            return text[: min(hits)]
        keep = _held_tail(text, self.stops)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        if self.stopped:
            return ""
        text, self._held = self._held + self._decoder.decode(b"", final=True), ""
        return text


@dataclass(frozen=True)
class Piece:
    """One item of a text generation: a text delta, a queue position, or the end."""

    text: str = ""
    queued: int | None = None
    finished: Finished | None = None
    tokens: tuple[int, ...] = ()  # the token ids this text came from (before any stop cut)


async def generate_text(
    bridge: EngineBridge, tokenizer: Any, request: GenerationRequest, stops: Sequence[str]
) -> AsyncIterator[Piece]:
    assembler = TextAssembler(tokenizer, stops)
    async for event in bridge.events(request):
        if isinstance(event, Queued):
            yield Piece(queued=event.position)
        elif isinstance(event, TokensOut):
            text = assembler.push(event.tokens)
            if text or not assembler.stopped:
                yield Piece(text, tokens=event.tokens)
            if assembler.stopped:
                bridge.scheduler.cancel(request.id)
        elif isinstance(event, Finished):
            tail = assembler.flush()
            if tail:
                yield Piece(tail)
            if assembler.stopped and event.reason == "cancelled":
                event = Finished("stop", event.usage)
            yield Piece(finished=event)
