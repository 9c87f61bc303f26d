"""Started by ``KG_STALL_TRACE`` (``tests/bench/stalltrace.py``): what holds the GIL or the
event loop for long, in a ``kube-gateway serve`` process only."""

import os
import sys

if os.environ.get("KG_STALL_TRACE") and "gateway.cli" in getattr(sys, "orig_argv", []):
    import contextlib
    import gc
    import threading
    import time
    import traceback

    def _start() -> None:
        out = open(os.environ["KG_STALL_TRACE"], "a", buffering=1)  # noqa: SIM115
        over = float(os.environ.get("KG_STALL_TRACE_MS", "30")) / 1000
        every = 0.005
        main = threading.main_thread().ident
        lock = threading.Lock()
        gc_started = [0.0]
        #: Collections since the last report: (end, seconds, generation, collected).
        collections: list[tuple[float, float, int, int]] = []
        counts = {0: 0, 1: 0, 2: 0}
        slow = {0: 0, 1: 0, 2: 0}

        #: ``KG_STALL_TRACE_WALKS``: each collection of the middle generation or older, and
        #: each that took WALK_MS of its thread's CPU or more, written with the young
        #: generations' counts at its start (``gc.get_count()``), the thread, its caller and
        #: its CPU time; for the collection before a group build (``before_build``, on the
        #: loop while no build runs) the young objects it walked, counted.  Never counted
        #: elsewhere: listing the young objects (``gc.get_objects``) while another thread
        #: builds a tuple from a generator failed that build once (``SystemError`` from
        #: ``_PyTuple_Resize``: the tuple being filled was referred to twice).
        walks = os.environ.get("KG_STALL_TRACE_WALKS") == "1"
        walk_ms = float(os.environ.get("KG_STALL_TRACE_WALK_MS", "5"))
        walk_start: dict[int, tuple[float, list[int], str]] = {}

        def caller() -> tuple[str, str]:
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename == __file__:
                frame = frame.f_back  # the frame whose allocation (or gc.collect) ran it
            first = frame.f_code.co_name if frame is not None else ""
            names = []
            while frame is not None and len(names) < 3:
                names.append(f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}")
                frame = frame.f_back
            return first, " < ".join(names)

        def on_walk(phase: str, info: dict) -> None:
            ident = threading.get_ident()
            generation = info["generation"]
            if phase == "start":
                first, where = caller()
                if first == "before_build":
                    young = [len(gc.get_objects(generation=g)) for g in range(generation + 1)]
                    kind = "young"
                else:
                    young = list(gc.get_count()[: generation + 1])
                    kind = "counts"
                walk_start[ident] = (time.thread_time(), young, f"{kind}|{where}")
                return
            began = walk_start.pop(ident, None)
            if began is None:
                return
            spent = (time.thread_time() - began[0]) * 1000
            kind, where = began[2].split("|", 1)
            if generation >= 1 or spent >= walk_ms:
                out.write(
                    f"{time.time():.3f} walk gen{generation} {kind} {began[1]} "
                    f"cpu {spent:.1f}ms freed {info['collected']} "
                    f"thread {threading.current_thread().name}: {where}\n"
                )

        def on_gc(phase: str, info: dict) -> None:
            now = time.perf_counter()
            if walks:
                on_walk(phase, info)
            if phase == "start":
                gc_started[0] = time.perf_counter()
                return
            took = now - gc_started[0]
            generation = info["generation"]
            counts[generation] += 1
            if took >= over:
                slow[generation] += 1
                with lock:
                    collections.append((now, took, generation, info["collected"]))

        gc.callbacks.append(on_gc)

        def where(frame: object, depth: int = 6) -> str:
            stack = traceback.extract_stack(frame)[-depth:]  # type: ignore[arg-type]
            return " < ".join(
                f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}" for f in reversed(stack)
            )

        def idle(frame: object) -> bool:
            """Waiting: in ``select``, under uvloop's ``run_forever`` (C, no frame of
            its own: the runner's frame is on top while the loop waits), or an idle
            executor worker."""
            code = frame.f_code  # type: ignore[attr-defined]
            if code.co_name == "_worker" and code.co_filename.endswith("thread.py"):
                return True  # an executor's idle worker, waiting for work
            return code.co_name in ("select", "run_forever") or code.co_filename.endswith(
                ("selectors.py", "threading.py", "queue.py", "runners.py")
            )

        #: Open ``schedstat`` files by thread id (read with ``pread``: cheap enough to do
        #: every 5 ms), listed again every 0.2 s.
        stat_files: dict[int, int] = {}
        listed = [0.0]

        def sched() -> dict[int, tuple[int, int]]:
            """Each thread's (ns on a CPU, ns waiting for one) from ``schedstat``."""
            now = time.monotonic()
            if now - listed[0] >= 0.2:
                listed[0] = now
                tids = {int(t) for t in os.listdir("/proc/self/task")}
                for tid in set(stat_files) - tids:
                    os.close(stat_files.pop(tid))
                for tid in tids - set(stat_files):
                    with contextlib.suppress(OSError):
                        stat_files[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
            found = {}
            for tid, fd in list(stat_files.items()):
                try:
                    ran, waited = os.pread(fd, 64, 0).split()[:2]
                except (OSError, ValueError):
                    continue
                found[tid] = (int(ran), int(waited))
            return found

        def cpu(before: dict, after: dict) -> str:
            """Where the late window's time went: this sampler's wait for a CPU (the
            machine's load), the loop thread's CPU time (the loop itself held the GIL)
            and each other thread that ran."""
            mine = threading.get_native_id()
            loop = threading.main_thread().native_id
            names = {t.native_id: t.name for t in threading.enumerate()}

            def delta(tid: int, i: int) -> float:
                return (after.get(tid, (0, 0))[i] - before.get(tid, (0, 0))[i]) / 1e6

            others = sorted(
                ((delta(t, 0) + delta(t, 1), t) for t in after if t not in (mine, loop)),
                reverse=True,
            )
            busy = ", ".join(
                f"{names.get(t, t)} {delta(t, 0):.0f}/{delta(t, 1):.0f}"
                for ms, t in others[:4]
                if ms >= 1
            )
            return (
                f"sampler waited for a CPU {delta(mine, 1):.0f}ms; loop thread ran "
                f"{delta(loop, 0):.0f}ms (waited for a CPU {delta(loop, 1):.0f}ms); "
                f"others ran/waited for a CPU ms: {busy or 'none'}"
            )

        summary_ident: list[int | None] = [None]

        def sample() -> None:
            last_key = None
            same_since = time.perf_counter()
            reported = False
            while True:
                # No frame is held across the sleep: a frame the sampler holds while a
                # schema build freezes (gateway/graphql/engine/collector.py) is frozen with
                # its locals, and what of it ends in a cycle is never freed (it made RSS
                # creep ~5 MB a churn round in bench_scale with --stall-trace).
                frames = frame = None
                stats = sched()  # (before the clock: its reads wait for the GIL again)
                before = time.perf_counter()
                time.sleep(every)
                now = time.perf_counter()
                late = now - before - every
                frames = sys._current_frames()
                if late >= over:
                    with lock:
                        during = [c for c in collections if c[0] >= before - 0.001]
                        collections.clear()
                    gcs = ", ".join(f"gen{g} {t * 1000:.0f}ms ({n} freed)" for _, t, g, n in during)
                    out.write(
                        f"{time.time():.3f} GIL late {late * 1000:.0f}ms; gc: {gcs or 'none'}; "
                        f"{cpu(stats, sched())}\n"
                    )
                    for ident, frame in frames.items():
                        if ident not in (threading.get_ident(), summary_ident[0]) and not idle(
                            frame
                        ):
                            name = next(
                                (t.name for t in threading.enumerate() if t.ident == ident), "?"
                            )
                            out.write(f"    {name}: {where(frame)}\n")
                else:
                    with lock:
                        for _, t, g, n in collections:
                            out.write(f"{time.time():.3f} gc gen{g} {t * 1000:.0f}ms ({n} freed)\n")
                        collections.clear()
                frame = frames.get(main)
                if frame is None or idle(frame):
                    last_key, same_since, reported = None, now, False
                    continue
                key = (id(frame), frame.f_code, frame.f_lineno)
                if key != last_key:
                    last_key, same_since, reported = key, now, False
                elif not reported and now - same_since >= over:
                    reported = True
                    held = (now - same_since) * 1000
                    out.write(
                        f"{time.time():.3f} loop thread at one place {held:.0f}ms+: "
                        f"{where(frame, 10)}\n"
                    )

        def summary() -> None:
            while True:
                time.sleep(30)
                # (no gc.get_objects, nor gc.get_freeze_count: each walks a list of a million
                # objects or more holding the GIL, 80-300 ms measured: the trace would stall
                # the process it traces)
                out.write(
                    f"{time.time():.3f} gc counts {counts} over {over * 1000:.0f}ms {slow} "
                    f"young {gc.get_count()}\n"
                )

        threading.Thread(target=sample, name="stalltrace", daemon=True).start()
        summarizer = threading.Thread(target=summary, name="stalltrace-summary", daemon=True)
        summarizer.start()
        summary_ident[0] = summarizer.ident

    _start()
