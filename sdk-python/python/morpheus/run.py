# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Run an existing program under Morpheus.

    python -m morpheus.run [options] -m package.module [args...]
    python -m morpheus.run [options] script.py [args...]

Every thread that creates an asyncio event loop (``asyncio.run``, ``new_event_loop``) is registered
as a worker first, and the main thread is registered before the program starts; the program's own
``await morpheus.checkpoint_async()`` calls (or ``morpheus.Ticker``) then yield when the scheduler
asks. Without a scheduler everything runs detached and the program behaves as it would alone.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import runpy
import sys
from typing import List, Optional

from . import MorpheusError, init_worker
from .aio import WorkerEventLoopPolicy


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m morpheus.run",
        description="Run a Python program with its event-loop threads registered as Morpheus workers.",
    )
    parser.add_argument("--uvloop", action="store_true", help="run event loops on uvloop")
    parser.add_argument("--region", help="region file or pinned map (default: discovery, spec/SCB.md §1.2)")
    parser.add_argument("--socket", help="the scheduler agent's socket (default: MORPHEUS_SOCKET or the default path)")
    parser.add_argument("--slot", type=int, help="direct registration of this slot (harnesses that play the scheduler)")
    parser.add_argument("--detached", action="store_true", help="run detached whatever scheduler is present")
    escapable = parser.add_mutually_exclusive_group()
    escapable.add_argument("--escapable", dest="escapable", action="store_true", default=None,
                           help="let the scheduler escalate the workers (default for Python: no)")
    escapable.add_argument("--no-escapable", dest="escapable", action="store_false")
    parser.add_argument("--priority", type=int, default=0, help="advisory priority, -20..19 (default 0)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("-m", dest="module", metavar="MODULE", help="run a module as __main__, like python -m")
    target.add_argument("script", nargs="?", help="a script to run as __main__")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the program")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after the module name or the script belongs to the program.
    parser = _parser()
    program_args: List[str] = []
    for i, arg in enumerate(argv):
        if arg == "-m" and i + 1 < len(argv):
            program_args = argv[i + 2:]
            argv = argv[: i + 2]
            break
        if not arg.startswith("-") and (i == 0 or argv[i - 1] not in ("--region", "--socket", "--slot", "--priority")):
            program_args = argv[i + 1:]
            argv = argv[: i + 1]
            break
    opts = parser.parse_args(argv)
    if opts.script is not None and not os.path.isfile(opts.script):
        print(f"morpheus.run: no such script: {opts.script!r} (expected a Python file, or -m MODULE)", file=sys.stderr)
        return 2
    if opts.module is not None and importlib.util.find_spec(opts.module.split(".")[0]) is None:
        print(f"morpheus.run: no module named {opts.module!r}", file=sys.stderr)
        return 2
    worker_kwargs = {"escapable": opts.escapable, "priority": opts.priority}
    if opts.detached:
        worker_kwargs["detached"] = True
    if opts.region:
        worker_kwargs["region"] = opts.region
    if opts.socket:
        worker_kwargs["socket"] = opts.socket
    if opts.slot is not None:
        worker_kwargs["slot"] = opts.slot
    try:
        init_worker(**worker_kwargs)
    except MorpheusError as err:
        print(f"morpheus.run: cannot register the main thread: {err}", file=sys.stderr)
        return 2
    # Other threads' loops register themselves; a direct slot belongs to the main thread only.
    loop_kwargs = {k: v for k, v in worker_kwargs.items() if k != "slot"}
    if "slot" in worker_kwargs:
        loop_kwargs["detached"] = True
        loop_kwargs.pop("region", None)
        loop_kwargs.pop("socket", None)
    asyncio.set_event_loop_policy(WorkerEventLoopPolicy(use_uvloop=opts.uvloop, **loop_kwargs))
    if opts.module:
        sys.argv = [opts.module, *program_args]
        runpy.run_module(opts.module, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [opts.script, *program_args]
        runpy.run_path(opts.script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
