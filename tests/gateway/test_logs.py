"""Structured logs of `kube-gateway serve`: JSON lines on a pipe, a request id on every line
of a request (taken from the caller, returned to it), one access line per request and per
ended subscription, and never a token, a variable or a user name."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest
from websockets.sync.client import connect

from gateway.grpc.gen.kubegateway.v1 import pods_pb2, pods_pb2_grpc
from gateway.logs import JsonFormatter, LoopBatchedHandler, TextFormatter, fields_of, resolve_format
from gateway.requestid import EXTRA, AccessRecord, request_id_of
from tests.support.serve_process import Served, serve_process

TOKEN = "viewer-token"  # a demo token the start-up line does not print
SECRET_VARIABLE = "app=never-logged-7f3a"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    # stderr is a pipe: --log-format auto writes JSON
    with serve_process(tmp_path_factory.mktemp("home"), "--demo") as served:
        yield served


def _lines(served: Served) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in served.lines]


def _access(lines: list[str], request_id: str) -> list[dict[str, Any]]:
    parsed = (orjson.loads(line) for line in lines if '"gateway.access"' in line)
    return [p for p in parsed if p.get("request_id") == request_id]


def _access_line(served: Served, request_id: str, **expected: Any) -> dict[str, Any]:
    def matching(lines: list[str]) -> list[dict[str, Any]]:
        return [
            a for a in _access(lines, request_id) if all(a.get(k) == v for k, v in expected.items())
        ]

    served.wait_until(lambda lines: bool(matching(lines)))
    (line,) = matching(served.lines)
    return line


def test_requests_over_every_transport_are_logged_as_json_with_their_ids_and_no_secret(
    gateway: Served,
) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    query = (
        'query ListDemo($selector: String) { pods(namespace: "demo", labelSelector: '
        "$selector) { items { metadata { name } } } }"
    )
    with httpx.Client(base_url=gateway.http, timeout=30) as client:
        answer = client.post(
            "/graphql",
            json={"query": query, "variables": {"selector": SECRET_VARIABLE}},
            headers={**auth, "X-Request-Id": "test-123"},
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["data"]["pods"]["items"] == []
        assert answer.headers["x-request-id"] == "test-123"
        # an id that is not safe to log is replaced by a generated one
        replaced = client.get("/healthz", headers={"X-Request-Id": "bad id;<b>" + "x" * 200})
        generated = replaced.headers["x-request-id"]
        assert len(generated) == 32 and generated != "test-123"
        # a traceparent's trace id is the request id
        traced = client.get(
            "/healthz",
            headers={"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
        )
        assert traced.headers["x-request-id"] == "4bf92f3577b34da6a3ce929d0e0e4736"

        # an SSE subscription: one event, then the client leaves
        sse_headers = {**auth, "X-Request-Id": "sse-456", "Accept": "text/event-stream"}
        subscription = 'subscription Pods { watchPods(namespace: "demo") { type } }'
        with client.stream(
            "POST", "/graphql", json={"query": subscription}, headers=sse_headers
        ) as stream:
            assert stream.headers["x-request-id"] == "sse-456"
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    break
        # the same over multipart HTTP (Apollo Client's protocol)
        multipart_headers = {
            **auth,
            "X-Request-Id": "multipart-1",
            "Accept": 'multipart/mixed;subscriptionSpec="1.0"',
        }
        with client.stream(
            "POST", "/graphql", json={"query": subscription}, headers=multipart_headers
        ) as stream:
            assert stream.headers["x-request-id"] == "multipart-1"
            for line in stream.iter_lines():
                if '"payload"' in line:
                    break

    # gRPC: a call and a watch, the id in metadata both ways
    with grpc.insecure_channel(gateway.grpc) as channel:
        pods = pods_pb2_grpc.PodServiceStub(channel)
        metadata = (("authorization", f"Bearer {TOKEN}"), ("x-request-id", "grpc-789"))
        _, call = pods.List.with_call(
            pods_pb2.ListPodsRequest(namespace="demo"), metadata=metadata, timeout=30
        )
        assert ("x-request-id", "grpc-789") in call.initial_metadata()
        watch = pods.Watch(
            pods_pb2.WatchPodsRequest(namespace="demo"),
            metadata=(metadata[0], ("x-request-id", "grpc-watch-1")),
            timeout=60,
        )
        next(watch)
        assert ("x-request-id", "grpc-watch-1") in watch.initial_metadata()
        watch.cancel()

    # a WebSocket subscription, stopped by the client
    url = gateway.http.replace("http://", "ws://") + "/graphql"
    with connect(
        url,
        subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
        additional_headers={"X-Request-Id": "ws-321"},
        open_timeout=30,
    ) as ws:
        assert ws.response is not None
        assert ws.response.headers["x-request-id"] == "ws-321"
        ws.send(orjson.dumps({"type": "connection_init", "payload": {"authToken": TOKEN}}).decode())
        assert orjson.loads(ws.recv(timeout=30))["type"] == "connection_ack"
        ws.send(
            orjson.dumps(
                {"id": "1", "type": "subscribe", "payload": {"query": subscription}}
            ).decode()
        )
        assert orjson.loads(ws.recv(timeout=30))["type"] == "next"
        ws.send(orjson.dumps({"id": "1", "type": "complete"}).decode())

    query_line = _access_line(gateway, "test-123")
    assert query_line["level"] == "INFO" and query_line["logger"] == "gateway.access"
    assert query_line["transport"] == "http"
    assert query_line["method"] == "POST" and query_line["path"] == "/graphql"
    assert query_line["status"] == 200 and query_line["bytes"] == len(answer.content)
    assert query_line["operation"] == "ListDemo" and query_line["operation_type"] == "query"
    assert isinstance(query_line["duration_ms"], float)
    # the time of its upstream request, within the call's own
    assert 0 < query_line["upstream_ms"] <= query_line["duration_ms"]

    sse = _access_line(gateway, "sse-456")
    assert sse["transport"] == "sse" and sse["operation"] == "Pods"
    assert sse["operation_type"] == "subscription"
    assert sse["events"] >= 1 and sse["ended"] == "cancelled"

    multipart = _access_line(gateway, "multipart-1")
    assert multipart["transport"] == "multipart" and multipart["operation"] == "Pods"
    assert multipart["events"] >= 1 and multipart["ended"] == "cancelled"

    grpc_line = _access_line(gateway, "grpc-789")
    assert grpc_line["transport"] == "grpc" and grpc_line["status"] == "OK"
    assert grpc_line["path"] == "/kubegateway.v1.PodService/List"
    assert grpc_line["operation"] == "PodService.List" and grpc_line["bytes"] > 0
    assert 0 < grpc_line["upstream_ms"] <= grpc_line["duration_ms"]

    watch_line = _access_line(gateway, "grpc-watch-1")
    assert watch_line["operation"] == "PodService.Watch"
    assert watch_line["events"] >= 1 and watch_line["ended"] == "cancelled"
    assert watch_line["status"] == "CANCELLED"

    ws_op = _access_line(gateway, "ws-321", transport="websocket", operation="Pods")
    assert ws_op["operation_type"] == "subscription"
    assert ws_op["events"] >= 1 and ws_op["ended"] == "cancelled"
    ws_connection = _access_line(gateway, "ws-321", method="GET")
    assert ws_connection["status"] == 101 and ws_connection["transport"] == "websocket"
    # written when the connection ended (it is served outside its ASGI call, which returns
    # once it is accepted): its frames counted, its time the connection's whole life
    assert ws_connection["bytes"] > 0
    assert ws_connection["duration_ms"] >= ws_op["duration_ms"]

    # every line is one JSON object; nothing secret anywhere
    lines = _lines(gateway)
    for line in lines:
        assert {"time", "level", "logger", "message"} <= line.keys(), line
    assert any(line["logger"].startswith("uvicorn") for line in lines)  # uvicorn's too
    log = gateway.log
    for secret in (TOKEN, SECRET_VARIABLE, "never-logged", "viewer"):
        assert secret not in log, secret


def test_request_ids_are_taken_when_safe_and_generated_otherwise() -> None:
    assert request_id_of("test-123") == "test-123"
    assert request_id_of("a" * 128) == "a" * 128
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert request_id_of(None, tp) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert request_id_of("ok.id", tp) == "ok.id"
    for bad in ("a" * 129, "", "a b", 'a"b', "-lead", "x\n", "é"):
        generated = request_id_of(bad, tp)
        assert generated == "4bf92f3577b34da6a3ce929d0e0e4736", bad
    for bad_tp in ("00-" + "0" * 32 + "-00f067aa0ba902b7-01", "ff-" + tp[3:], tp.upper()):
        generated = request_id_of(None, bad_tp)
        assert len(generated) == 32 and generated != "4bf92f3577b34da6a3ce929d0e0e4736"


def test_formats() -> None:
    record = logging.LogRecord("gateway", logging.INFO, __file__, 1, "hello %s", ("x",), None)
    record.transport = "grpc"
    line = orjson.loads(JsonFormatter().format(record))
    assert line["message"] == "hello x" and line["transport"] == "grpc"
    assert line["level"] == "INFO" and line["logger"] == "gateway"
    assert line["time"].endswith("Z") and "request_id" not in line
    assert TextFormatter().format(record).endswith("INFO gateway: hello x transport=grpc")

    class Stream:
        def __init__(self, tty: bool) -> None:
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty

    assert resolve_format("auto", Stream(True)) == "text"  # type: ignore[arg-type]
    assert resolve_format("auto", Stream(False)) == "json"  # type: ignore[arg-type]
    assert resolve_format("text", Stream(False)) == "text"  # type: ignore[arg-type]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _access_record(record: AccessRecord, *filters: logging.Filter) -> logging.LogRecord:
    """The ``LogRecord`` of ``record``'s access line, as the access logger makes it."""
    logger = logging.getLogger("gateway.access")
    taken = _Records()
    for f in filters:
        taken.addFilter(f)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(taken)
    logger.setLevel(logging.INFO)
    # (not on to the root's handlers: pytest's capture formats the record, which adds its
    # ``message`` to it, so the formatters would never take the fields it stashed)
    logger.propagate = False
    try:
        record.log(logging.INFO)
    finally:
        logger.removeHandler(taken)
        logger.setLevel(level)
        logger.propagate = propagate
    (made,) = taken.records
    return made


def _walked(made: logging.LogRecord) -> logging.LogRecord:
    """The same record without the fields stashed with it: the formatters find them among
    its attributes, as any other record's."""
    copy = logging.makeLogRecord(vars(made))
    del copy.__dict__[EXTRA]
    return copy


def test_an_access_line_formats_as_its_fields_found_among_the_record_s_attributes() -> None:
    # The fields stashed with an access line's record are what the formatters would find
    # by walking the record: the same line, byte for byte, in both formats.
    streamed, posted, _ = _sample_records()
    for record in (streamed, posted):
        made = _access_record(record)
        assert made.__dict__[EXTRA] == {"request_id": record.request_id, **record.fields()}
        assert fields_of(made) == made.__dict__[EXTRA]
        for formatter in (JsonFormatter(), TextFormatter()):
            assert formatter.format(made) == formatter.format(_walked(made))
        line = orjson.loads(JsonFormatter().format(made))
        assert line["request_id"] == record.request_id and line["duration_ms"] == 4.2
        assert EXTRA not in line

    # An attribute added to the record after the log call (a filter's) is a field too.
    class Tagged(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            record.zone = "eu-1"
            return True

    tagged = _access_record(posted, Tagged())
    line = orjson.loads(JsonFormatter().format(tagged))
    assert line["zone"] == "eu-1" and line["operation"] == "q"
    assert JsonFormatter().format(tagged) == JsonFormatter().format(_walked(tagged))
    assert TextFormatter().format(tagged).endswith(" zone=eu-1")

    # A field a filter rewrites (a redaction) is written as rewritten, not as it was given.
    class Redacted(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            record.path = "/redacted"
            return True

    redacted = _access_record(posted, Redacted())
    for formatter in (JsonFormatter(), TextFormatter()):
        assert "/redacted" in formatter.format(redacted)
        assert formatter.format(redacted) == formatter.format(_walked(redacted))
    assert orjson.loads(JsonFormatter().format(redacted))["path"] == "/redacted"


def test_log_format_is_a_setting(tmp_path: Path) -> None:
    from gateway.settings import load

    assert load([]).log_format == "auto"
    assert load(["--log-format", "text"]).log_format == "text"
    assert load([], {"KUBE_GATEWAY_LOG_FORMAT": "json"}).log_format == "json"
    with pytest.raises(SystemExit):
        load(["--log-format", "xml"])


def test_a_text_line_is_one_line_whatever_its_values_hold() -> None:
    forged = "/graphql\n2026-01-01 00:00:00,000 INFO gateway.access: GET /admin 200"
    record = logging.LogRecord(
        "gateway.access", logging.INFO, __file__, 1, "%s %s", ("GET", forged), None
    )
    record.path = forged
    record.operation = 'x" status=200 \x1b[31mred\u2028'
    line = TextFormatter().format(record)
    assert "\n" not in line and "\x1b" not in line and "\u2028" not in line
    assert "GET /graphql\\n2026-01-01 00:00:00,000 INFO gateway.access: GET /admin 200 " in line
    assert ' path="/graphql\\n2026-01-01' in line
    assert ' operation="x\\" status=200 \\x1b[31mred\\u2028"' in line
    # JSON lines were one line already; the text of a line is the same.
    assert orjson.loads(JsonFormatter().format(record))["path"] == forged


#: One token per way a token arrives; none may be logged, even at debug level.
TOKENS = {
    "http-header": "tok-http-header-3c1f",
    "http-valid": "viewer-token",
    "sse": "tok-sse-8d2e",
    "multipart": "tok-multipart-5a9b",
    "ws-upgrade-header": "tok-ws-upgrade-77c4",
    "ws-init-authorization": "tok-ws-init-auth-1b6d",
    "ws-init-headers": "tok-ws-init-headers-9e0a",
    "ws-init-authtoken": "tok-ws-init-authtoken-4f2c",
    "ws-legacy-authtoken": "alice-token",
    "grpc": "tok-grpc-meta-6d3b",
    "grpc-valid": "viewer-token",
}


def _ws_init(
    served: Served, payload: dict[str, Any], protocol: str = "graphql-transport-ws", **headers: str
) -> None:
    url = served.http.replace("http://", "ws://") + "/graphql"
    with connect(
        url,
        subprotocols=[protocol],  # type: ignore[list-item]
        additional_headers=headers,
        open_timeout=30,
    ) as ws:
        ws.send(orjson.dumps({"type": "connection_init", "payload": payload}).decode())
        answer = orjson.loads(ws.recv(timeout=30))
        assert answer["type"] in ("connection_ack", "connection_error"), answer
        kind = "start" if protocol == "graphql-ws" else "subscribe"
        query = 'subscription { watchPods(namespace: "demo") { type } }'
        ws.send(orjson.dumps({"id": "1", "type": kind, "payload": {"query": query}}).decode())
        ws.recv(timeout=30)


def test_no_token_is_logged_at_debug_level_whichever_way_it_arrives(tmp_path: Path) -> None:
    with serve_process(
        tmp_path, "--demo", "--log-level", "debug", "--log-format", "text"
    ) as served:
        served.wait_serving()
        query = '{ pods(namespace: "demo") { items { metadata { name } } } }'
        subscription = 'subscription { watchPods(namespace: "demo") { type } }'

        def bearer(way: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {TOKENS[way]}"}

        with httpx.Client(base_url=served.http, timeout=30) as client:
            for way in ("http-header", "http-valid"):
                client.post("/graphql", json={"query": query}, headers=bearer(way))
                client.get("/graphql", params={"query": query}, headers=bearer(way))
            for way, accept in (("sse", "text/event-stream"), ("multipart", "multipart/mixed")):
                with client.stream(
                    "POST",
                    "/graphql",
                    json={"query": subscription},
                    headers={**bearer(way), "Accept": accept},
                ) as stream:
                    next(stream.iter_lines())
        _ws_init(served, {}, **bearer("ws-upgrade-header"))
        _ws_init(served, bearer("ws-init-authorization"))
        _ws_init(served, {"headers": bearer("ws-init-headers")})
        _ws_init(served, {"authToken": TOKENS["ws-init-authtoken"]})
        _ws_init(served, {"authToken": TOKENS["ws-legacy-authtoken"]}, "graphql-ws")
        with grpc.insecure_channel(served.grpc) as channel:
            pods = pods_pb2_grpc.PodServiceStub(channel)
            for way in ("grpc", "grpc-valid"):
                with contextlib.suppress(grpc.RpcError):
                    pods.List(
                        pods_pb2.ListPodsRequest(namespace="demo"),
                        metadata=(("authorization", f"Bearer {TOKENS[way]}"),),
                        timeout=30,
                    )
        # Every way was served (its access line written) before the log is read.
        served.wait_until(
            lambda lines: (
                sum("gateway.access: GET /graphql 101" in line for line in lines) >= 5
                and any("PodService/List" in line for line in lines[-50:])
            )
        )
    log = served.log
    assert " DEBUG " in log  # the level the test is about was on
    for way, token in TOKENS.items():
        assert token not in log, (way, [line for line in served.lines if token in line])


def test_a_request_path_cannot_forge_a_text_log_line(tmp_path: Path) -> None:
    with serve_process(tmp_path, "--demo", "--log-format", "text") as served:
        forged = "2026-01-01 00:00:00,000 INFO gateway.access: GET /forged 200"
        with httpx.Client(base_url=served.http, timeout=30) as client:
            path = "/nothing%0a" + forged.replace(" ", "%20") + "%1b[31m"
            assert client.get(path, headers={"X-Request-Id": "forge-1"}).status_code == 404
        served.wait_until(lambda lines: any("request_id=forge-1" in line for line in lines))
    assert not any(line.startswith(forged) for line in served.lines)
    (line,) = [line for line in served.lines if "request_id=forge-1" in line]
    assert (
        "GET /nothing\\n2026-01-01 00:00:00,000 INFO gateway.access: GET /forged 200\\x1b[31m 404"
        in line
    )
    assert "\x1b" not in served.log


class _Lines:
    """A stream that keeps each write."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> None:
        self.writes.append(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def test_lines_of_one_loop_step_are_written_together_in_order() -> None:
    """The handler ``configure`` installs writes the lines one event-loop step logged with
    one write when the next step begins; a line from another thread, and a flush, write
    the waiting ones first, so the order is the order they were logged in."""
    import asyncio
    import threading

    from gateway.logs import LoopBatchedHandler

    stream = _Lines()
    handler = LoopBatchedHandler(stream)  # type: ignore[arg-type]
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("test.batched")
    logger.propagate = False
    logger.addHandler(handler)
    try:

        async def serve() -> None:
            for i in range(3):
                logger.warning("step-one-%d", i)
            assert stream.writes == []  # not before the step ends
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert stream.writes == ["step-one-0\nstep-one-1\nstep-one-2\n"]
            logger.warning("waiting")
            thread = threading.Thread(target=logger.warning, args=("from-a-thread",))
            thread.start()
            thread.join()
            assert stream.writes[1:] == ["waiting\nfrom-a-thread\n"]
            logger.warning("flushed")
            handler.flush()
            assert stream.writes[2:] == ["flushed\n"]

        asyncio.run(serve())
        logger.warning("no loop")
        assert stream.writes[3:] == ["no loop\n"]
    finally:
        logger.removeHandler(handler)


def test_lines_logged_on_a_loop_wait_for_the_delay_and_the_most_lines_bound_it() -> None:
    """With a delay (what ``configure`` installs: ``LINE_DELAY``), the lines of several
    loop steps are written with one write once the delay has passed, not at each step's
    end; ``most`` lines waiting are written at once; a flush writes what waits."""
    import asyncio

    from gateway.logs import LINE_DELAY, LoopBatchedHandler

    assert LINE_DELAY > 0

    class Stream:
        def __init__(self) -> None:
            self.writes: list[tuple[float, str]] = []
            self.written = asyncio.Event()

        def write(self, text: str) -> None:
            self.writes.append((asyncio.get_running_loop().time(), text))
            self.written.set()

        def flush(self) -> None:
            pass

    logger = logging.getLogger("test.delayed")
    logger.propagate = False

    async def serve() -> None:
        stream = Stream()
        handler = LoopBatchedHandler(stream, delay=0.05, most=4)  # type: ignore[arg-type]
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        try:
            loop = asyncio.get_running_loop()
            first = loop.time()
            for i in range(3):  # three loop steps, one line each
                logger.warning("line-%d", i)
                await asyncio.sleep(0)
            assert stream.writes == []  # a step's end no longer writes
            await asyncio.wait_for(stream.written.wait(), 10)
            ((at, text),) = stream.writes
            assert text == "line-0\nline-1\nline-2\n"
            assert at - first >= 0.05  # the loop's clock: the timer fired, not a step
            stream.written.clear()
            for i in range(4):  # the fourth reaches `most`: written at once, in order
                logger.warning("burst-%d", i)
            assert [text for _, text in stream.writes[1:]] == [
                "burst-0\nburst-1\nburst-2\nburst-3\n"
            ]
            logger.warning("flushed")
            handler.flush()
            assert stream.writes[-1][1] == "flushed\n"
        finally:
            logger.removeHandler(handler)

    asyncio.run(serve())


@contextlib.contextmanager
def _configured(fmt: str = "json") -> Iterator[_Lines]:
    """The process's logging as ``kube-gateway serve`` configures it, writing to a stream of
    the test's; everything ``configure`` changes is put back after."""
    from gateway import logs

    root = logging.getLogger()
    names = ("httpx", "httpcore", "uvicorn", "uvicorn.error", "uvicorn.asgi", "gateway.access")
    kept = (
        list(root.handlers),
        root.level,
        {
            name: (logging.getLogger(name).level, list(logging.getLogger(name).handlers))
            for name in names
        },
        (logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing),
    )
    stream = _Lines()
    logs.configure("info", fmt, stream=stream)  # type: ignore[arg-type]
    try:
        yield stream
    finally:
        handlers, level, levels, flags = kept
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
        for name, (each_level, each_handlers) in levels.items():
            logging.getLogger(name).setLevel(each_level)
            logging.getLogger(name).handlers[:] = each_handlers
        (
            logging._srcfile,
            logging.logThreads,
            logging.logProcesses,
            logging.logMultiprocessing,
        ) = flags


def _sample_records() -> list[AccessRecord]:
    streamed = AccessRecord("id-1", "grpc", "POST", "/kubegateway.v1.PodService/Watch")
    streamed.operation, streamed.events, streamed.status = "PodService.Watch", 3, "OK"
    streamed.upstream[0] = 0.0012
    posted = AccessRecord("id-2", "http", "POST", "/graphql")
    posted.operation, posted.operation_type, posted.status, posted.bytes = "q", "query", 200, 9
    failed = AccessRecord("id-3", "http", "GET", '/api/x\n\u2028"')
    failed.status = 503
    for record in (streamed, posted, failed):
        record.stopped = record.started + 0.0042
    return [streamed, posted, failed]


def _handler() -> LoopBatchedHandler:
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, LoopBatchedHandler)
    return handler


def test_an_access_line_written_without_its_record_is_the_line_its_record_writes() -> None:
    # As served (the one JSON handler on the root, nothing else listening), an access line
    # is written without a LogRecord: the same object, key for key and in the same order,
    # as the record of it formats to.
    from gateway.requestid import access_log

    for record in _sample_records():
        with _configured() as stream:
            handler = _handler()
            fields = {"request_id": record.request_id, **record.fields()}
            message = f"{record.method} {record.path} {record.status}"
            level = logging.WARNING if record.status == 503 else logging.INFO
            assert handler.write_straight(access_log, level, message, fields) is True
            record.logged()
            lines = "".join(stream.writes).rstrip("\n").split("\n")  # (not at U+2028)
            straight = [orjson.loads(line) for line in lines]
        assert straight[0] == straight[1]
        made = orjson.loads(JsonFormatter().format(_access_record(record)))
        made["level"] = logging.getLevelName(level)  # (the helper logs at INFO)
        for line in straight:
            assert list(line) == list(made)  # the same keys in the same order
            assert line["time"].endswith("Z") and len(line["time"]) == len(made["time"])
            assert {**line, "time": None} == {**made, "time": None}
        assert straight[1]["level"] == logging.getLevelName(level)


def test_an_access_line_is_a_record_whenever_anything_else_would_see_it() -> None:
    # Each of these would see the record (a handler, a filter, a factory's attributes, a
    # text line): the line is then logged as a record, its fields among its attributes.
    from gateway.requestid import access_log

    posted = _sample_records()[1]
    fields = {"request_id": posted.request_id, **posted.fields()}

    class Seen(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            seen.append(record)
            return True

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        made = logging.LogRecord(*args, **kwargs)
        seen.append(made)
        return made

    seen: list[logging.LogRecord] = []
    taken = _Records()
    ways: dict[str, Any] = {
        "a handler on the access logger": lambda: access_log.addHandler(taken),
        "a filter on the access logger": lambda: access_log.addFilter(Seen()),
        "a handler on its parent": lambda: logging.getLogger("gateway").addHandler(taken),
        "a second handler on the root": lambda: logging.getLogger().addHandler(taken),
        "a filter on the handler": lambda: logging.getLogger().handlers[0].addFilter(Seen()),
        "a record factory": lambda: logging.setLogRecordFactory(factory),
    }
    for way, change in ways.items():
        seen.clear()
        taken.records.clear()
        with _configured() as stream:
            try:
                change()
                handler = _handler()
                assert not handler.write_straight(access_log, logging.INFO, "m", fields), way
                posted.log()
            finally:
                access_log.removeHandler(taken)
                logging.getLogger().removeHandler(taken)
                logging.getLogger("gateway").removeHandler(taken)
                access_log.filters.clear()
                logging.setLogRecordFactory(logging.LogRecord)
            (record,) = [*seen, *taken.records]
            assert record.status == 200 and record.operation == "q", way  # type: ignore[attr-defined]
            (line,) = "".join(stream.writes).rstrip("\n").split("\n")
            assert orjson.loads(line)["operation"] == "q", way

    # A text line is the text formatter's; a line below the logger's level is not written.
    with _configured("text") as stream:
        assert len(logging.getLogger().handlers) == 1
        handler = _handler()
        assert not handler.write_straight(access_log, logging.INFO, "m", fields)
        posted.log()
        assert "".join(stream.writes).rstrip("\n").endswith("operation=q operation_type=query")
    with _configured() as stream:
        access_log.setLevel(logging.WARNING)
        assert len(logging.getLogger().handlers) == 1
        handler = _handler()
        assert not handler.write_straight(access_log, logging.INFO, "m", fields)
        posted.log()
        assert stream.writes == []
