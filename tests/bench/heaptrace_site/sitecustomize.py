"""Started by ``KG_HEAP_TRACE`` (``tests/bench/heaptrace.py``): tracemalloc and a thread
writing heap figures, in a ``kube-gateway serve`` process only."""

import os
import sys

if os.environ.get("KG_HEAP_TRACE") and "gateway.cli" in getattr(sys, "orig_argv", []):
    import ctypes
    import ctypes.util
    import tempfile
    import threading
    import time
    import tracemalloc
    from pathlib import Path

    def _start() -> None:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        sys.path.insert(0, here)
        try:
            from heaptrace import malloc_totals  # tests/bench/heaptrace.py
        finally:
            sys.path.remove(here)
            sys.modules.pop("heaptrace", None)

        out = os.environ["KG_HEAP_TRACE"]
        every = float(os.environ.get("KG_HEAP_TRACE_EVERY", "20"))
        base_after = float(os.environ.get("KG_HEAP_TRACE_BASE", "60"))
        tracemalloc.start(int(os.environ.get("KG_HEAP_TRACE_FRAMES", "8")))
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.fopen.restype = ctypes.c_void_p
        libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.fclose.argtypes = [ctypes.c_void_p]
        started = time.monotonic()
        skip = [tracemalloc.Filter(False, tracemalloc.__file__)]

        def heap() -> dict[str, int]:
            with tempfile.NamedTemporaryFile(suffix=".xml") as f:
                fp = libc.fopen(f.name.encode(), b"w")
                libc.malloc_info(0, fp)
                libc.fclose(fp)
                return malloc_totals(Path(f.name).read_text())

        def rss() -> int:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
            return 0

        def run() -> None:
            base = None
            while True:
                time.sleep(every)
                t = time.monotonic() - started
                snap = tracemalloc.take_snapshot().filter_traces(skip)
                h = heap()
                used = h["system"] - h["free"]
                traced = sum(s.size for s in snap.statistics("filename"))
                mb = 1 << 20
                lines = [
                    f"== t={t:.0f}s RSS {rss() / mb:.1f} MB; glibc taken {h['system'] / mb:.1f}"
                    f" MB, free {h['free'] / mb:.1f} MB, in use {used / mb:.1f}"
                    f" MB, mmapped {h['mmap'] / mb:.1f} MB, {h['arenas']} arenas; Python "
                    f"(tracemalloc) {traced / mb:.1f} MB"
                ]
                if base is None and t >= base_after:
                    base = snap
                    lines.append("   (the base of the diffs below)")
                elif base is not None:
                    lines.append("-- grown most since the base, by line:")
                    for s in snap.compare_to(base, "lineno")[:15]:
                        lines.append(f"   {s}")
                    lines.append("-- grown most since the base, by traceback:")
                    for s in snap.compare_to(base, "traceback")[:4]:
                        lines.append(f"   {s.size_diff / 1024:+.0f} KiB, {s.count_diff:+} blocks")
                        lines.extend(f"      {fr}" for fr in s.traceback.format()[-16:])
                lines.append("-- largest now, by line:")
                for s in snap.statistics("lineno")[:10]:
                    lines.append(f"   {s}")
                with open(out, "a") as f:
                    f.write("\n".join(lines) + "\n")

        threading.Thread(target=run, name="heaptrace", daemon=True).start()

    _start()
