# SPDX-License-Identifier: Apache-2.0 OR MIT
"""asyncio integration: run a loop as a Morpheus worker, checkpoint inside long loops.

    import morpheus.aio

    async def main():
        async for row in morpheus.aio.checkpointed(rows, every=1000):
            work(row)

    morpheus.aio.run(main())                    # default loop
    morpheus.aio.run(main(), use_uvloop=True)   # uvloop

A worker is one OS thread: the thread that runs the event loop. Every task on that loop shares it, so
a checkpoint in any task honours the scheduler's request for the whole loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, AsyncIterator, Awaitable, Coroutine, Iterable, Iterator, Optional, TypeVar, Union

from . import _morpheus, init_worker

_T = TypeVar("_T")


def _uvloop_policy() -> "asyncio.AbstractEventLoopPolicy":
    try:
        import uvloop
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise RuntimeError("use_uvloop=True needs the uvloop package (pip install uvloop)") from err
    return uvloop.EventLoopPolicy()


@contextlib.contextmanager
def worker_scope(**worker_kwargs: Any) -> Iterator[Optional[_morpheus.Worker]]:
    """Register the calling thread for the duration, unless it already holds a worker.

    Closing the worker at the end never raises: whatever happened to the scheduler meanwhile (stopped,
    killed, restarted) is logged on the ``morpheus`` logger, and the body's result or exception is
    what the caller sees.
    """
    if _morpheus.current_worker() is not None:
        yield _morpheus.current_worker()
        return
    worker = _morpheus.Worker(**worker_kwargs)
    try:
        yield worker
    finally:
        try:
            worker.close()
        except _morpheus.MorpheusError as err:
            logging.getLogger("morpheus").warning("closing the worker: %s", err)


def run(main: Coroutine[Any, Any, _T], *, use_uvloop: bool = False, debug: Optional[bool] = None,
        **worker_kwargs: Any) -> _T:
    """``asyncio.run(main)`` with the calling thread registered as a worker for its duration.

    ``worker_kwargs`` go to :class:`morpheus.Worker` (``region=``, ``slot=``, ``escapable=``, ...).
    With ``use_uvloop=True`` the loop is uvloop's. Returns ``main()``'s value (or raises its
    exception) whatever happened to the scheduler: without one the loop runs detached, and a
    scheduler that stops, is killed or restarts meanwhile is logged, never raised.
    """
    if not asyncio.iscoroutine(main):
        raise TypeError(f"morpheus.aio.run expects a coroutine, got {type(main).__name__}")
    with worker_scope(**worker_kwargs):
        if use_uvloop:
            loop = _uvloop_policy().new_event_loop()
            try:
                if debug is not None:
                    loop.set_debug(debug)
                return loop.run_until_complete(main)
            finally:
                _shutdown_loop(loop)
        return asyncio.run(main, debug=debug)


def _shutdown_loop(loop: asyncio.AbstractEventLoop) -> None:
    try:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


async def checkpointed(items: Union[Iterable[_T], AsyncIterator[_T]], every: int = 1000) -> AsyncIterator[_T]:
    """Iterate ``items`` (sync or async), checkpointing once every ``every`` items.

    Convenient for existing loops; a hand-written ``await ticker`` (:class:`morpheus.Ticker`) is
    cheaper per item because it needs no async generator.
    """
    ticker = _morpheus.Ticker(every)
    if hasattr(items, "__aiter__"):
        async for item in items:  # type: ignore[union-attr]
            yield item
            await ticker
    else:
        for item in items:  # type: ignore[union-attr]
            yield item
            await ticker


async def gather_checkpointed(*aws: Awaitable[Any]) -> list:
    """``asyncio.gather`` whose tasks start after one checkpoint (a convenient safe point)."""
    await _morpheus.checkpoint_async()
    return list(await asyncio.gather(*aws))


class WorkerEventLoopPolicy(asyncio.DefaultEventLoopPolicy):  # type: ignore[misc,valid-type]
    """An event-loop policy whose loops run on registered worker threads.

    ``new_event_loop()`` registers the calling thread (the one that will run the loop) if it holds no
    worker yet, so ``asyncio.run`` in any thread of an unmodified application runs under Morpheus.
    Wraps another policy's loops (uvloop's with ``use_uvloop=True``).
    """

    def __init__(self, *, use_uvloop: bool = False, **worker_kwargs: Any) -> None:
        super().__init__()
        self._base = _uvloop_policy() if use_uvloop else None
        self._worker_kwargs = worker_kwargs

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        if _morpheus.current_worker() is None:
            init_worker(**self._worker_kwargs)
        if self._base is not None:
            return self._base.new_event_loop()
        return super().new_event_loop()


__all__ = ["WorkerEventLoopPolicy", "checkpointed", "gather_checkpointed", "run", "worker_scope"]
