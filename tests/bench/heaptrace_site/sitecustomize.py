"""Started by ``KG_HEAP_TRACE`` (``tests/bench/heaptrace.py``): tracemalloc and a thread
writing heap figures, in a ``kube-gateway serve`` process only."""

import os
import sys

if os.environ.get("KG_HEAP_TRACE") and "gateway.cli" in getattr(sys, "orig_argv", []):
    import ctypes
    import ctypes.util
    import gc
    import tempfile
    import threading
    import time
    import tracemalloc
    from collections import Counter
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
        frames = int(os.environ.get("KG_HEAP_TRACE_FRAMES", "8"))
        if frames:
            tracemalloc.start(frames)
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

        def collect() -> str:
            """A full collection whose garbage is kept to be described, then freed: what
            cyclic garbage held (large strings and bytes by the container holding them,
            frames by their code).  With ``KG_HEAP_TRACE_UNFREEZE`` the permanent generation
            (``gc.freeze``, which serve uses around schema builds) is walked too: cyclic
            garbage frozen while it was still alive is found only so."""
            unfreeze = bool(os.environ.get("KG_HEAP_TRACE_UNFREEZE"))
            frozen = gc.get_freeze_count()
            if unfreeze:
                # What the collector would find anyway goes first: what is left to find
                # is the garbage the permanent generation held.
                gc.collect()
                gc.unfreeze()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                found = gc.collect()
                garbage = list(gc.garbage)
                gc.garbage.clear()
            finally:
                gc.set_debug(0)
            kinds = Counter(type(o).__name__ for o in garbage)
            shallow = sum(sys.getsizeof(o) for o in garbage)
            large: Counter[str] = Counter()
            held = 0
            for o in garbage:
                for r in gc.get_referents(o):
                    if isinstance(r, (bytes, bytearray, str, memoryview)):
                        n = sys.getsizeof(r)
                        if n >= 64 * 1024:
                            large[type(o).__name__ + " -> " + type(r).__name__] += n
                            held += n
            codes = Counter(
                f"{o.f_code.co_filename.rsplit('/', 2)[-1]}:{o.f_code.co_name}"
                for o in garbage
                if type(o).__name__ == "frame"
            )
            h2 = heap()
            mb = 1 << 20
            del garbage
            if unfreeze:
                gc.collect()  # frees what was kept to be described, now let go
                gc.freeze()
            h3 = heap()
            lines = [
                f"   gc: {found} unreachable objects (of {frozen} frozen before: "
                f"{'walked' if unfreeze else 'not walked'}), {shallow / mb:.1f} MB shallow; "
                f"large strings/bytes they held "
                f"{held / mb:.1f} MB; glibc in use after freeing them "
                f"{(h3['system'] - h3['free']) / mb:.1f} MB "
                f"(was {(h2['system'] - h2['free']) / mb:.1f})",
                f"   gc kinds: {kinds.most_common(12)}",
                f"   gc large: {[(k, round(v / mb, 1)) for k, v in large.most_common(8)]}",
                f"   gc frames: {codes.most_common(15)}",
            ]
            return "\n".join(lines) + "\n"

        def run() -> None:
            base = None
            while True:
                time.sleep(every)
                t = time.monotonic() - started
                h = heap()
                used = h["system"] - h["free"]
                mb = 1 << 20
                if not frames:  # glibc's figures only
                    with open(out, "a") as f:
                        f.write(
                            f"== t={t:.0f}s RSS {rss() / mb:.1f} MB; glibc taken "
                            f"{h['system'] / mb:.1f} MB, free {h['free'] / mb:.1f} MB, in use "
                            f"{used / mb:.1f} MB, mmapped {h['mmap'] / mb:.1f} MB, "
                            f"{h['arenas']} arenas; gc counts {gc.get_count()}\n"
                        )
                        if os.environ.get("KG_HEAP_TRACE_GC"):
                            f.write(collect())
                    continue
                snap = tracemalloc.take_snapshot().filter_traces(skip)
                traced = sum(s.size for s in snap.statistics("filename"))
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
                large = [t for t in snap.traces if t.size >= 256 * 1024]
                lines.append(
                    f"-- blocks of 256 KiB or more alive now: {len(large)}, "
                    f"{sum(t.size for t in large) / mb:.1f} MB; by traceback:"
                )
                sites: dict[object, list[int]] = {}
                for trace in large:
                    sites.setdefault(trace.traceback, []).append(trace.size)
                for tb, sizes in sorted(sites.items(), key=lambda kv: -sum(kv[1]))[:6]:
                    lines.append(f"   {len(sizes)} blocks, {sum(sizes) / mb:.1f} MB")
                    lines.extend(f"      {fr}" for fr in tb.format()[-16:])  # type: ignore[attr-defined]
                lines.append("-- largest now, by line:")
                for s in snap.statistics("lineno")[:10]:
                    lines.append(f"   {s}")
                with open(out, "a") as f:
                    f.write("\n".join(lines) + "\n")

        threading.Thread(target=run, name="heaptrace", daemon=True).start()

    _start()
