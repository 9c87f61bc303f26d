"""gateway.core.process.heap: the C heap's free pages go back to the system after a burst of
work."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

from gateway.core.process import heap


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_the_c_library_has_a_trim_exactly_where_it_is_glibc() -> None:
    assert (heap.trim_function() is not None) == (platform.libc_ver()[0] == "glibc")


async def test_freed_heap_pages_go_back_to_the_system() -> None:
    """Blocks the C allocator keeps in its heap (32 KiB: over Python's 512 bytes, under
    glibc's mmap threshold), every fifth kept: the runs of four freed between them cannot
    go back by shrinking the heap; given back, their pages are, and the RSS falls."""
    blocks = [bytes(32 * 1024) + i.to_bytes(4, "little") for i in range(3_600)]  # ~118 MB
    kept = blocks[::5]
    del blocks
    before = _rss_kb()
    await heap.give_back()
    after = _rss_kb()
    assert len(kept) == 720
    if heap.trim_function() is None:
        assert after >= before - 1024  # nothing to call: nothing given back
    else:
        assert before - after > 40_000, (before, after)  # most of the ~96 MB freed


_ARENAS = """
import ctypes, sys, tempfile, threading
from gateway.core.process import heap

if sys.argv[1] != "default":
    assert heap.limit_arenas(arenas=int(sys.argv[1]), env={})
start = threading.Barrier(16)

def work():
    start.wait()  # all at once: each thread's first malloc takes an arena of its own
    blocks = [bytearray(4096) for _ in range(200)]
    del blocks

threads = [threading.Thread(target=work) for _ in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
with tempfile.NamedTemporaryFile() as out:
    handle = libc.fopen(out.name.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(handle))
    libc.fclose(ctypes.c_void_p(handle))
    print(open(out.name).read().count("<heap nr="))
"""


def _arenas(limit: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _ARENAS, limit], capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip())


def test_the_arenas_are_limited() -> None:
    """16 threads allocating at once take many malloc arenas by default, at most the limit
    with :func:`heap.limit_arenas`."""
    assert _arenas("2") <= 2 < _arenas("default")
