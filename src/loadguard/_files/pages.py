"""Proof without reading: is a CPU tensor still the untouched bytes of a memory-mapped checkpoint file?

transformers loads safetensors on CPU by mapping the file privately: a loaded weight *is* the file's page
cache until something writes to it, at which point the kernel copies the page (copy-on-write) and it
becomes anonymous memory. Linux reports, per page, whether it is present, swapped, and file-backed
(``/proc/self/pagemap`` bits 63, 62, 61; readable without privileges). A tensor whose every page lies in
a private mapping of the checkpoint file, at the file offset where the checkpoint stores that very key,
and is either untouched or still file-backed, holds exactly the checkpoint's bytes.

Anything uncertain (another OS, a tensor not found in a mapping, a page written, swapped, or shared with
a neighbour that was written) answers False, and the caller compares the values.
"""

from __future__ import annotations

import bisect
import mmap
import os
import sys
from dataclasses import dataclass

_PAGE = mmap.PAGESIZE
_PRESENT, _SWAPPED, _FILE = 1 << 63, 1 << 62, 1 << 61


@dataclass(frozen=True)
class _Mapping:
    start: int
    end: int
    offset: int
    private: bool
    writable: bool
    path: str


class PageOracle:
    """Answers :meth:`untouched` for tensors of this process; snapshots the memory map once."""

    def __init__(self) -> None:
        self.available = sys.platform.startswith("linux") and os.access("/proc/self/pagemap", os.R_OK)
        self._mappings: list[_Mapping] = []
        self._pagemap = None
        if not self.available:
            return
        try:
            with open("/proc/self/maps") as maps:
                for line in maps:
                    parts = line.split(maxsplit=5)
                    if len(parts) < 6 or not parts[5].startswith("/"):
                        continue
                    start, end = (int(x, 16) for x in parts[0].split("-"))
                    perms = parts[1]
                    # the kernel prints resolved absolute paths: no realpath per line needed
                    self._mappings.append(
                        _Mapping(
                            start, end, int(parts[2], 16), perms[3] == "p", perms[1] == "w", parts[5].rstrip("\n")
                        )
                    )
            self._pagemap = open("/proc/self/pagemap", "rb")  # noqa: SIM115  (closed in close())
        except OSError:
            self.available = False
        self._mappings.sort(key=lambda m: m.start)
        self._starts = [m.start for m in self._mappings]
        self._real: dict[str, str] = {}

    def untouched(self, address: int, nbytes: int, path: str, file_offset: int) -> bool:
        """True only if ``nbytes`` at ``address`` are provably the unmodified bytes of ``path`` at ``file_offset``."""
        if not self.available or nbytes <= 0:
            return False
        real = self._real.get(path)
        if real is None:
            real = self._real.setdefault(path, os.path.realpath(path))
        index = bisect.bisect_right(self._starts, address) - 1
        mapping = self._mappings[index] if index >= 0 else None
        if (
            mapping is None
            or address + nbytes > mapping.end
            or mapping.path != real
            or not (mapping.private or not mapping.writable)
        ):
            return False  # a writable shared mapping writes through to the file: nothing to prove there
        if mapping.offset + (address - mapping.start) != file_offset:
            return False
        first, last = address // _PAGE, (address + nbytes - 1) // _PAGE
        try:
            self._pagemap.seek(first * 8)
            raw = self._pagemap.read((last - first + 1) * 8)
        except OSError:
            return False
        if len(raw) != (last - first + 1) * 8:
            return False
        import numpy  # a dependency of transformers; vectorizes the check of a few hundred thousand entries

        entries = numpy.frombuffer(raw, dtype="<u8")
        swapped = (entries & _SWAPPED) != 0  # a swapped page of a private mapping is an anonymous (written) page
        written = ((entries & _PRESENT) != 0) & ((entries & _FILE) == 0)  # copy-on-write happened
        return not bool((swapped | written).any())

    def close(self) -> None:
        if self._pagemap is not None:
            self._pagemap.close()
            self._pagemap = None
