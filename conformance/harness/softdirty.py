# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Did the agent store anything into the pages of an SCB during one request? (CONFORMANCE.md §1.1,
`expect.untouched`.)

Linux keeps a soft-dirty bit per page of each process mapping (CONFIG_MEM_SOFT_DIRTY): writing "4" to
/proc/PID/clear_refs clears them, and any later store by that process, even of the value the byte
already held, sets bit 55 of the page's entry in /proc/PID/pagemap. The bit belongs to the agent's
mapping, so the harness's own stores (through its own mapping of the same file) never set it. The
check covers every byte of the pages (reserved bytes and neighbours included) where store tracing
(stores.py) covers four fields; it sees that a page was written, not which field or value.

Where the kernel lacks soft-dirty tracking, Unavailable says so; the cell is a skip, never a pass.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct

from stores import Unavailable, region_mappings

PAGE = os.sysconf("SC_PAGE_SIZE")
SOFT_DIRTY_BIT = 1 << 55
PRESENT_BIT = 1 << 63


def _entry(pid: int, address: int) -> int:
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        pagemap.seek(address // PAGE * 8)
        return struct.unpack("<Q", pagemap.read(8))[0]


def _clear(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as refs:
        refs.write("4")


def available() -> str | None:
    """None if soft-dirty tracking works here, else why not (checked on a page of this process)."""
    try:
        probe = mmap.mmap(-1, PAGE)
        address = ctypes.addressof(ctypes.c_char.from_buffer(probe))
        _clear(os.getpid())
        probe[0] = 1  # a store after the clear: its page must be soft-dirty now
        works = bool(_entry(os.getpid(), address) & SOFT_DIRTY_BIT)
    except OSError as err:
        return f"soft-dirty bits cannot be read here ({err})"
    if not works:
        return ("the kernel does not track soft-dirty bits (CONFIG_MEM_SOFT_DIRTY is off): "
                "a written page never shows bit 55 in /proc/PID/pagemap")
    return None


class PageWatch:
    """Clear the agent's soft-dirty bits now; `written()` lists the pages of [start, end) of the region
    file (file offsets) that the agent has stored into since."""

    def __init__(self, pid: int, path: str, start: int, end: int):
        why = available()
        if why:
            raise Unavailable(why)
        self.pid, self.path, self.start, self.end = pid, path, start, end
        if not region_mappings(pid, path):
            raise Unavailable("the agent does not map the region (yet); nothing to watch")
        try:
            _clear(pid)
        except OSError as err:
            raise Unavailable(f"cannot clear the agent's soft-dirty bits ({err})") from None

    def written(self) -> list[int]:
        pages = []
        for map_start, map_end, file_off in region_mappings(self.pid, self.path):
            lo, hi = max(self.start, file_off), min(self.end, file_off + map_end - map_start)
            page = lo - lo % PAGE
            while page < hi:
                entry = _entry(self.pid, map_start + page - file_off)
                if entry & PRESENT_BIT and entry & SOFT_DIRTY_BIT:
                    pages.append(page)
                page += PAGE
        return pages
