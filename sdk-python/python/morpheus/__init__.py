# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Morpheus: kernel-guided cooperative scheduling for Python and asyncio.

A worker thread registers once (:class:`Worker` or :func:`init_worker`), then calls a checkpoint at
safe points. The checkpoint costs one load while the scheduler asks nothing; when it asks, the
checkpoint yields once (to the event loop for :func:`checkpoint_async`) and acknowledges.

    import asyncio, morpheus

    async def crunch(rows):
        tick = morpheus.Ticker(every=1000)
        for row in rows:
            work(row)
            await tick              # a real checkpoint every 1,000th time; nearly free otherwise

    with morpheus.Worker():         # the thread that runs the event loop is the worker
        asyncio.run(main())

Without a scheduler (no region found) everything runs detached: checkpoints never yield, critical
sections only count. The protocol itself lives in the Rust core (sdk-rust); this package wraps it.
"""

from __future__ import annotations

import functools as _functools
import inspect as _inspect
import threading as _threading
from typing import Any, Callable, Optional, TypeVar, Union, overload

from . import _morpheus
from ._morpheus import (
    ABI_MAJOR,
    ABI_MINOR,
    Checkpoint,
    ErrorCode,
    MorpheusError,
    PendingCheckpoint,
    Region,
    Ticker,
    Worker,
    attach,
    checkpoint,
    checkpoint_async,
    critical_depth,
    current_worker,
    escapable_default,
)

# One exception class per ABI error_code (BadMagicError, SlotBusyError, ...), made by the extension
# from the generated ABI so that the names are never copied by hand.
for _name, _cls in _morpheus.ERROR_CLASSES.items():
    globals()[_name] = _cls
del _name, _cls

__version__: str = _morpheus.__version__

_F = TypeVar("_F", bound=Callable[..., Any])


class _CriticalSection:
    """Context manager (and decorator) for a critical section; see :func:`critical`."""

    __slots__ = ()

    def __enter__(self) -> "_CriticalSection":
        _morpheus.critical_enter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        _morpheus.critical_exit()

    async def __aenter__(self) -> "_CriticalSection":
        _morpheus.critical_enter()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        _morpheus.critical_exit()

    def __call__(self, func: _F) -> _F:
        return _wrap_critical(func)


_SECTION = _CriticalSection()


def _wrap_critical(func: _F) -> _F:
    if not callable(func):
        raise TypeError(f"morpheus.critical decorates a function, got {type(func).__name__}")
    if _inspect.isasyncgenfunction(func):
        return _critical_async_generator(func)  # type: ignore[return-value]
    if _inspect.isgeneratorfunction(func):
        return _critical_generator(func)  # type: ignore[return-value]
    if _inspect.iscoroutinefunction(func):

        @_functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            _morpheus.critical_enter()
            try:
                return await func(*args, **kwargs)
            finally:
                _morpheus.critical_exit()

        return async_wrapper  # type: ignore[return-value]

    @_functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _morpheus.critical_enter()
        try:
            return func(*args, **kwargs)
        finally:
            _morpheus.critical_exit()

    return wrapper  # type: ignore[return-value]


def _critical_generator(func: Callable[..., Any]) -> Callable[..., Any]:
    """A generator whose body runs inside a critical section at every step (not while suspended at
    a ``yield``: the consumer's code between two items is not covered)."""

    @_functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        gen = func(*args, **kwargs)
        to_send: Any = None
        to_throw: Optional[BaseException] = None
        while True:
            _morpheus.critical_enter()
            try:
                item = gen.send(to_send) if to_throw is None else gen.throw(to_throw)
            except StopIteration as stop:
                return stop.value
            finally:
                _morpheus.critical_exit()
            try:
                to_send, to_throw = (yield item), None
            except GeneratorExit:
                _morpheus.critical_enter()
                try:
                    gen.close()
                finally:
                    _morpheus.critical_exit()
                raise
            except BaseException as err:  # thrown in by the consumer: pass it on, inside the section
                to_send, to_throw = None, err

    return wrapper


def _critical_async_generator(func: Callable[..., Any]) -> Callable[..., Any]:
    """An async generator whose body runs inside a critical section at every step (including its own
    awaits, as for ``async def``; not while suspended at a ``yield``)."""

    @_functools.wraps(func)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        agen = func(*args, **kwargs)
        to_send: Any = None
        to_throw: Optional[BaseException] = None
        while True:
            _morpheus.critical_enter()
            try:
                item = await (agen.asend(to_send) if to_throw is None else agen.athrow(to_throw))
            except StopAsyncIteration:
                return
            finally:
                _morpheus.critical_exit()
            try:
                to_send, to_throw = (yield item), None
            except GeneratorExit:
                _morpheus.critical_enter()
                try:
                    await agen.aclose()
                finally:
                    _morpheus.critical_exit()
                raise
            except BaseException as err:
                to_send, to_throw = None, err

    return wrapper


@overload
def critical() -> _CriticalSection: ...
@overload
def critical(func: _F) -> _F: ...
def critical(func: Optional[_F] = None) -> Union[_CriticalSection, _F]:
    """Mark code the scheduler must not interrupt (FFI, buffers lent out, a lock held).

    ``with morpheus.critical():`` or ``@morpheus.critical`` (plain and ``async def`` functions,
    generators and async generators: for these the section covers every step of the body, not the
    consumer's code between two items).
    Sections nest; only the outermost enter and exit are visible to the scheduler. Inside one, a
    checkpoint never yields; a request that arrives is honoured by the first checkpoint after the
    outermost exit. The depth belongs to the worker thread: for an ``async def`` it also covers the
    other tasks that run on the loop while the decorated coroutine is suspended.
    """
    if func is None:
        return _SECTION
    return _wrap_critical(func)


_local = _threading.local()


def init_worker(
    *,
    region: Optional[str] = None,
    slot: Optional[int] = None,
    socket: Optional[str] = None,
    detached: bool = False,
    escapable: Optional[bool] = None,
    priority: int = 0,
) -> Worker:
    """Register the calling thread as a worker and keep it registered until the thread ends.

    Same arguments as :class:`Worker`. The worker is released when the thread exits, and at
    interpreter exit for the main thread; call :meth:`Worker.close` to end it earlier.
    """
    worker = Worker(
        region=region, slot=slot, socket=socket, detached=detached, escapable=escapable, priority=priority
    )
    # The registration itself lives with the thread (the extension releases it when the thread exits,
    # and at interpreter exit for the main thread); the handle is kept for current_worker()'s sake.
    _local.worker = worker
    return worker


__all__ = [
    "ABI_MAJOR",
    "ABI_MINOR",
    "Checkpoint",
    "ErrorCode",
    "MorpheusError",
    "PendingCheckpoint",
    "Region",
    "Ticker",
    "Worker",
    "attach",
    "checkpoint",
    "checkpoint_async",
    "critical",
    "critical_depth",
    "current_worker",
    "escapable_default",
    "init_worker",
    *_morpheus.ERROR_CLASSES,
]
