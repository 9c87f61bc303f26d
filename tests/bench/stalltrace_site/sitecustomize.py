"""Started by ``KG_STALL_TRACE`` (``tests/bench/stalltrace.py``): what holds the GIL or the
event loop for long, in a ``kube-gateway serve`` process only."""

import os
import sys

if os.environ.get("KG_STALL_TRACE") and "gateway.cli" in getattr(sys, "orig_argv", []):
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

        def on_gc(phase: str, info: dict) -> None:
            now = time.perf_counter()
            if phase == "start":
                gc_started[0] = now
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
            """Waiting: in ``select``, or under uvloop's ``run_forever`` (C, no frame of
            its own: the runner's frame is on top while the loop waits)."""
            code = frame.f_code  # type: ignore[attr-defined]
            return code.co_name in ("select", "run_forever") or code.co_filename.endswith(
                ("selectors.py", "threading.py", "queue.py", "runners.py")
            )

        def sample() -> None:
            last_key = None
            same_since = time.perf_counter()
            reported = False
            while True:
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
                        f"{time.time():.3f} GIL late {late * 1000:.0f}ms; gc: {gcs or 'none'}\n"
                    )
                    for ident, frame in frames.items():
                        if ident != threading.get_ident() and not idle(frame):
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
                # (no gc.get_objects: listing millions of objects would stall the process)
                out.write(
                    f"{time.time():.3f} gc counts {counts} over {over * 1000:.0f}ms {slow} "
                    f"frozen {gc.get_freeze_count()} young {gc.get_count()}\n"
                )

        threading.Thread(target=sample, name="stalltrace", daemon=True).start()
        threading.Thread(target=summary, name="stalltrace-summary", daemon=True).start()

    _start()
