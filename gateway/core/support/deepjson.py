"""JSON as deep as the apiserver takes it: decoded without a nesting limit, in bounded steps.

``orjson`` refuses JSON nested deeper than 1,024 levels (and writes none deeper than 254);
the apiserver stores objects nested up to 10,000 levels (a custom resource with
``x-kubernetes-preserve-unknown-fields``).  One such object must not fail a whole list, nor
stop a watch (its event decoded again and again from the same version), for everyone who
can see it.  So every upstream body goes through :func:`loads` (or :func:`parse`, driven a
step at a time): ``orjson.loads`` first, and only when it refuses the body for its depth, an
iterative decoder here, with no nesting limit and no recursion (neither the interpreter's
recursion limit nor the C stack of a thread bounds it).

That decoder builds the value ``orjson.loads`` would build if it had no limit: the
structure is parsed here, and every string and number is decoded by ``orjson.loads`` of its
own token (so escapes, UTF-8, surrogates, leading zeros, integers past 64 bits and infinite
floats are accepted or refused exactly as ``orjson`` does).  One difference, on purpose: a
container nested deeper than :data:`FROZEN_DEPTH` levels (counted from the body's root) is
kept as an ``orjson.Fragment`` of its JSON text, which is what ``orjson.dumps`` would write
for its value (:func:`dumps`: strings and numbers by ``orjson.dumps``).  The gateway then
never holds a Python value nested deeper than that: nothing recursive of Python's or of the
gateway's (comparison, copies, projections, the GraphQL executor) can meet a recursion
limit, and ``orjson.dumps`` writes the fragment's text as it is into any answer, so an
answer holding such an object is the object whole.

Shallower objects, 255 to 1,024 levels deep, ``orjson.loads`` decodes whole, but
``orjson.dumps`` refuses to write them: the answer encoders (GraphQL over HTTP, SSE and
WebSocket, the generic gRPC service's JSON) write through :func:`dumps`, which then writes
:func:`frozen` (the same bytes, still by ``orjson``), and the ``Struct`` encoder counts
levels (:class:`gateway.core.lists.protowire.TooDeep`).  A depth check of every body at decode
time was measured and refused: no check done outside ``orjson`` costs less than a few per
cent of the decode of an ordinary list, where :func:`dumps` costs nothing until it fails.

The work is bounded per step: :func:`parse` is a generator yielding every
:data:`STEP_TOKENS` tokens (about a millisecond); :func:`aloads` drives it with a yield to
the event loop in between.  An object the apiserver can store is at most a few megabytes, so
its decode here takes at most a few hundred steps.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Generator
from typing import Any, Final

import orjson

__all__ = [
    "FROZEN_DEPTH",
    "STEP_TOKENS",
    "TRIAL_LEVELS",
    "aloads",
    "dumps",
    "encode",
    "frozen",
    "loads",
    "parse",
    "run",
    "too_deep",
    "too_deep_to_write",
]

#: Containers nested deeper than this (the body's root at depth 1) are held as their JSON
#: text (``orjson.Fragment``).  Well below ``orjson.dumps``' own limit (254), which also
#: counts the levels an answer wraps an object in (a GraphQL answer's data, lists, fields).
FROZEN_DEPTH: Final = 100
#: The levels of a value too deep to write in which :func:`frozen` tries ``orjson.dumps`` on
#: each container first (an answer's envelope and items: written at orjson's speed).
TRIAL_LEVELS: Final = 8
#: Tokens decoded between two yields of :func:`parse` (~1 ms of work).
STEP_TOKENS: Final = 4096

#: What a decoding generator yields between two steps.
Parser = Generator[None, None, Any]

# One token after optional whitespace: a string (escapes kept whole; orjson checks them), a
# number (loosely; orjson checks it), one structural character, or a literal.
_TOKEN: Final = re.compile(
    rb'[ \t\r\n]*(?:("[^"\\]*(?:\\.[^"\\]*)*")|([-0-9][-+.eE0-9]*)|([\[\]{},:])|(true|false|null))',
    re.DOTALL,
)
_LITERALS: Final[dict[bytes, Any]] = {b"true": True, b"false": False, b"null": None}
_WHITESPACE: Final = b" \t\r\n"

# What the decoder expects next.
_VALUE, _FIRST_VALUE, _KEY, _FIRST_KEY, _COLON, _NEXT, _END = range(7)


def too_deep(exc: orjson.JSONDecodeError) -> bool:
    """Did ``orjson.loads`` refuse a body only for its nesting (not for being invalid)?"""
    return exc.msg.startswith("depth limit exceeded")


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """``orjson.loads(data)``, and the same value for JSON nested deeper than it takes
    (containers past :data:`FROZEN_DEPTH` as fragments), in one piece.

    Raises:
        orjson.JSONDecodeError: ``data`` is not JSON.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if not too_deep(exc):
            raise
    return run(parse(data))


async def aloads(data: bytes | bytearray | memoryview | str) -> Any:
    """:func:`loads`, yielding to the event loop between steps of a deep decode."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if not too_deep(exc):
            raise
    gen = parse(data)
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value
        await asyncio.sleep(0)


def run(gen: Parser) -> Any:
    """Drive a decoding generator to its end at once; its value."""
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


def _error(message: str, data: bytes, pos: int) -> orjson.JSONDecodeError:
    return orjson.JSONDecodeError(message, data.decode("utf-8", "replace"), pos)


def parse(
    data: bytes | bytearray | memoryview | str,
    *,
    frozen: int = FROZEN_DEPTH,
    step: int = STEP_TOKENS,
) -> Parser:
    """A generator decoding ``data`` with no nesting limit, yielding every ``step`` tokens;
    its value (the ``StopIteration`` value) is ``orjson.loads``' with containers nested
    deeper than ``frozen`` as ``orjson.Fragment`` of :func:`dumps` of their value.

    Raises:
        orjson.JSONDecodeError: ``data`` is not JSON.
    """
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    elif not isinstance(data, bytes):
        data = bytes(data)
    match = _TOKEN.match
    leaf = orjson.loads
    pos = 0
    stack: list[Any] = []  # the open containers
    keys: list[Any] = []  # for each open object, its key waiting for a value
    state = _VALUE
    root: Any = None
    budget = step
    while True:
        budget -= 1
        if not budget:
            budget = step
            yield
        m = match(data, pos)
        if m is None:
            if state == _END and not data[pos:].strip(_WHITESPACE):
                return root
            raise _error("unexpected character", data, pos)
        pos = m.end()
        string, number, mark, literal = m.groups()
        if state == _END:
            raise _error("trailing characters", data, m.start())
        value: Any
        if mark is not None:
            if mark in (b"{", b"["):
                if state > _FIRST_VALUE:
                    raise _error("unexpected character", data, m.start())
                if mark == b"{":
                    stack.append({})
                    keys.append(None)
                    state = _FIRST_KEY
                else:
                    stack.append([])
                    keys.append(None)
                    state = _FIRST_VALUE
                continue
            if mark in (b"}", b"]"):
                top = stack[-1] if stack else None
                if mark == b"}":
                    if top.__class__ is not dict or state not in (_NEXT, _FIRST_KEY):
                        raise _error("unexpected character", data, m.start())
                elif top.__class__ is not list or state not in (_NEXT, _FIRST_VALUE):
                    raise _error("unexpected character", data, m.start())
                depth = len(stack)
                value = stack.pop()
                keys.pop()
                if depth == frozen + 1:
                    value = orjson.Fragment(encode(value))
            elif mark == b",":
                if state != _NEXT:
                    raise _error("unexpected character", data, m.start())
                state = _KEY if stack[-1].__class__ is dict else _VALUE
                continue
            else:  # ":"
                if state != _COLON:
                    raise _error("unexpected character", data, m.start())
                state = _VALUE
                continue
        elif string is not None:
            value = leaf(string)
            if state in (_KEY, _FIRST_KEY):
                keys[-1] = value
                state = _COLON
                continue
            if state > _FIRST_VALUE:
                raise _error("unexpected string", data, m.start())
        else:
            if state > _FIRST_VALUE:
                raise _error("unexpected value", data, m.start())
            value = leaf(number) if number is not None else _LITERALS[literal]
        # a whole value: the root, or the next member of the open container
        if not stack:
            root = value
            state = _END
            continue
        top = stack[-1]
        if top.__class__ is dict:
            top[keys[-1]] = value
        else:
            top.append(value)
        state = _NEXT


class _Text:
    """Text :func:`encode` writes as it is (a mark on its work stack)."""

    __slots__ = ("text",)

    def __init__(self, text: bytes) -> None:
        self.text = text


_CLOSE_OBJECT: Final = _Text(b"}")
_CLOSE_ARRAY: Final = _Text(b"]")
_COMMA: Final = _Text(b",")


def encode(value: Any) -> bytes:
    """The bytes ``orjson.dumps(value)`` would write if it had no nesting limit, written
    without recursion (strings, numbers and fragments by ``orjson.dumps`` itself).

    Raises:
        orjson.JSONEncodeError: a value orjson cannot write.
    """
    out: list[bytes] = []
    work: list[Any] = [value]
    dumps_ = orjson.dumps
    while work:
        v = work.pop()
        if v.__class__ is _Text:  # a mark pushed below
            out.append(v.text)
        elif isinstance(v, dict):
            if not v:
                out.append(b"{}")
                continue
            out.append(b"{")
            work.append(_CLOSE_OBJECT)
            pairs = list(v.items())
            for i in range(len(pairs) - 1, -1, -1):
                key, member = pairs[i]
                if key.__class__ is not str:
                    raise orjson.JSONEncodeError("Dict key must be str")
                work.append(member)
                work.append(_Text(dumps_(key) + b":" if i == 0 else b"," + dumps_(key) + b":"))
        elif isinstance(v, (list, tuple)):
            if not v:
                out.append(b"[]")
                continue
            out.append(b"[")
            work.append(_CLOSE_ARRAY)
            for i in range(len(v) - 1, 0, -1):
                work.append(v[i])
                work.append(_COMMA)
            work.append(v[0])
        else:
            out.append(dumps_(v))
    return b"".join(out)


def too_deep_to_write(exc: orjson.JSONEncodeError) -> bool:
    """Did ``orjson.dumps`` refuse a value only for its nesting (past 254 levels)?"""
    return "ecursion limit" in str(exc)


def dumps(value: Any) -> bytes:
    """``orjson.dumps(value)``, and for a value nested deeper than it writes (254 levels),
    the same bytes: the answer encoders' one function.

    ``orjson.loads`` decodes objects up to 1,024 levels deep (the apiserver stores them up
    to 10,000), so an answer may hold one that ``orjson.dumps`` refuses.  Such a value is
    written by ``orjson`` still, from :func:`frozen` (its parts past :data:`FROZEN_DEPTH`
    as fragments): C speed, no recursion of Python's, and ordinary answers pay nothing
    (one ``orjson.dumps``).

    Raises:
        orjson.JSONEncodeError: a value orjson cannot write.
    """
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        if not too_deep_to_write(exc):
            raise
    return orjson.dumps(frozen(value))


def frozen(value: Any, depth: int = FROZEN_DEPTH) -> Any:
    """``value`` with every container nested deeper than ``depth`` levels (``value`` at
    level 1) held as an ``orjson.Fragment`` of its :func:`dumps`: what ``orjson.dumps``
    writes of it is ``orjson.dumps(value)``'s bytes, had it no nesting limit.

    ``value`` itself is not changed.  A container in the first :data:`TRIAL_LEVELS` levels
    (an answer's envelope, its list, each item) that ``orjson.dumps`` writes is held as
    those bytes, so an answer's ordinary parts cost one ``orjson.dumps`` each; the others
    are copied down to ``depth`` by a walk without recursion, and a fragment's own parts
    past ``depth`` levels are fragments in turn, so any depth is written ``depth`` levels
    at a time (a failed try writes at most 254 levels: at most :data:`TRIAL_LEVELS` of them
    per path and fragment).
    """
    if not isinstance(value, (dict, list, tuple)):
        return value
    root: Any = {} if isinstance(value, dict) else []
    work: list[tuple[Any, Any, int]] = [(value, root, 1)]
    while work:
        source, target, level = work.pop()
        inner = level + 1
        pairs = source.items() if isinstance(source, dict) else enumerate(source)
        for key, member in pairs:
            held = member
            if isinstance(member, (dict, list, tuple)):
                if inner > depth:
                    held = orjson.Fragment(dumps(member))
                else:
                    held = _tried(member) if inner <= TRIAL_LEVELS else None
                    if held is None:
                        held = {} if isinstance(member, dict) else []
                        work.append((member, held, inner))
            if target.__class__ is dict:
                target[key] = held
            else:
                target.append(held)
    return root


def _tried(value: Any) -> orjson.Fragment | None:
    """``value`` written by ``orjson.dumps`` as a fragment, or ``None`` when too deep."""
    try:
        return orjson.Fragment(orjson.dumps(value))
    except orjson.JSONEncodeError as exc:
        if not too_deep_to_write(exc):
            raise
    return None
