"""A snapshot's columns as C-level data: masks of bytes, texts joined as UTF-8, value codes.

What a view's filter costs is a pass over every slot, and a pass is only cheap when no
Python code runs per slot.  This module keeps, per snapshot generation (in
:attr:`~gateway.core.views.store.Snapshot.memo`, so it goes with the generation, and with
the cache), what makes each pass one or a few C loops:

- a **mask** is ``bytes``, one byte per slot, 1 where the slot is selected: the total is
  ``mask.count(1)``, ``and``/``or`` of masks are one ``&``/``|`` of two integers made of
  them (``int.from_bytes``: a byte of 0 or 1 each, so the bitwise operation is the
  bytewise one), ``not`` is a ``translate``, and a page walks the sorted index through
  ``compress`` over the mask;
- the **texts** of a column (substring, prefix and search) are joined into one UTF-8
  ``bytes``, a ``\\x00`` after each slot's text: the matches of a substring are found by
  one ``replace`` with a marker (UTF-8 is self-synchronising: a substring of the bytes
  is a substring of the text), and the marked text becomes a mask by deleting every other
  byte and folding each slot's markers to one (``translate``, ``replace``), about a
  millisecond for 30,000 names whatever the number of matches;
- the **codes** of a column: its distinct sort values (:func:`~gateway.core.views.store.
  sort_value`, ``(rank, value)``) numbered, and each slot's number (``bytes`` when there
  are at most 256 of them).  A condition (``eq``, ``in``, ``exists``, a range, a label or
  field selector requirement) is then evaluated once per distinct value, with the same
  code that would test each slot, and the answers become the mask by one ``translate`` of
  the codes (or one ``map`` when there are more than 256); counts grouped by a field are
  a ``count`` per distinct value of the codes with the unselected slots blanked.

Every path falls back to the plain per-slot evaluation where its premise does not hold
(a text holding the separator or the marker, a value whose equality class is wider than
what the condition distinguishes): answers are the same either way, only the time differs
(``tests/core/views/test_columns.py`` checks them against a plain evaluation).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from gateway.core.views.spec import FieldPath
from gateway.core.views.store import Snapshot

#: One byte per slot, 1 where the slot is selected.
Mask = bytes

_FLIP: Final = bytes.maketrans(b"\x00\x01", b"\x01\x00")
#: Every byte but the separator (0) and the marker (1).
_OTHERS: Final = bytes(range(2, 256))
#: A slot that had a marker (2, after folding) becomes 1; its separator's 0 stays.
_FOLDED: Final = bytes.maketrans(b"\x02", b"\x01")
#: A mask's 1 as every bit of a byte (a mask over codes).
_SPREAD: Final = bytes.maketrans(b"\x01", b"\xff")
#: Distinct values of a column past which its codes are a list, not bytes.
SMALL: Final = 256
#: Distinct values past which a condition is not evaluated per distinct value (a call per
#: value would cost what the per-slot paths cost).
MANY: Final = 4096
_NUMBERS: Final = frozenset(("int32", "int64", "double"))
_MISSING: Final[Any] = object()


# -- masks -------------------------------------------------------------------------------------


def full(n: int, value: bool) -> Mask:
    return (b"\x01" if value else b"\x00") * n


def of_bools(values: Iterable[Any]) -> Mask:
    """A mask from a slot's truth values (``bool``: ``bytes`` takes them as 0 and 1)."""
    return bytes(values)


def negate(mask: Mask) -> Mask:
    return mask.translate(_FLIP)


def combine(masks: Sequence[Mask], every: bool) -> Mask:
    """The masks ANDed (``every``) or ORed: bitwise over integers of their bytes."""
    n = len(masks[0])
    acc = int.from_bytes(masks[0], "little")
    for mask in masks[1:]:
        if every:
            acc &= int.from_bytes(mask, "little")
        else:
            acc |= int.from_bytes(mask, "little")
    return acc.to_bytes(n, "little")


def occupied(snap: Snapshot) -> Mask:
    """The occupied slots as a mask, once per generation."""
    found: Mask | None = snap.memo.get("mask:occupied")
    if found is None:
        found = snap.memo["mask:occupied"] = bytes(map(bool, snap.names))
    return found


# -- texts -------------------------------------------------------------------------------------


def joined(snap: Snapshot, key: str, texts: list[str]) -> bytes | None:
    """``texts`` as UTF-8, each followed by ``\\x00``, once per generation; ``None`` when a
    text holds the separator or the marker (the caller then tests each text)."""
    memo_key = f"utf8:{key}"
    found = snap.memo.get(memo_key, _MISSING)
    if found is _MISSING:
        data = ("\x00".join(texts) + "\x00").encode("utf-8", "surrogatepass")
        found = snap.memo[memo_key] = None if data.count(0) != len(texts) or 1 in data else data
    return found  # type: ignore[no-any-return]


def having(data: bytes, n: int, want: str, prefix: bool) -> Mask | None:
    """Which of the ``n`` texts joined in ``data`` contain (or start with) the non-empty
    ``want``; ``None`` when ``want`` holds the separator or the marker."""
    needle = want.encode("utf-8", "surrogatepass")
    if not needle or 0 in needle or 1 in needle:
        return None
    mark = b"\x01" * len(needle)  # of the same length: replaced in place, about twice faster
    if prefix:  # a text starts after a separator: the first one too, with one put before it
        marked = (b"\x00" + data).replace(b"\x00" + needle, b"\x00" + mark)[1:]
    else:
        marked = data.replace(needle, mark)
    # each slot is now its markers then its separator: fold them to one byte per slot
    bits = marked.translate(None, _OTHERS).replace(b"\x01\x00", b"\x02")
    found = bits.translate(_FOLDED, b"\x01")
    assert len(found) == n
    return found


# -- codes -------------------------------------------------------------------------------------


class Codes:
    """A column's distinct values numbered in order of first appearance.

    Attributes:
        keys: the distinct sort values (``None``: a free slot), by number.
        number: a value's number.
        codes: each slot's number: ``bytes`` when :attr:`keys` has at most :data:`SMALL`
            entries, else a list.
    """

    __slots__ = ("codes", "keys", "number")

    def __init__(self, column: list[tuple[int, Any] | None]) -> None:
        number: dict[Any, Any] = dict.fromkeys([None])
        number.update(dict.fromkeys(column))
        for i, key in enumerate(number):  # free slots (None) are 0
            number[key] = i
        self.number = number
        self.keys: list[Any] = list(number)
        found = list(map(number.__getitem__, column))
        self.codes: bytes | list[int] = bytes(found) if len(number) <= SMALL else found

    def mask(self, table: Sequence[bool]) -> Mask:
        """The mask of the slots whose value's entry in ``table`` is true."""
        if type(self.codes) is bytes:
            return self.codes.translate(bytes(table) + bytes(SMALL - len(table)))
        bits = bytes(table)
        return bytes(map(bits.__getitem__, self.codes))

    def members(self, keys: Iterable[Any]) -> Mask:
        """The mask of the slots whose value is one of ``keys`` (absent keys: none)."""
        table = [False] * len(self.keys)
        for key in keys:
            at = self.number.get(key)
            if at is not None:
                table[at] = True
        return self.mask(table)


def codes(snap: Snapshot, path: FieldPath, column: list[tuple[int, Any] | None]) -> Codes:
    """The codes of ``path``'s column, once per generation."""
    memo_key = f"codes:{path.kind}:{path.keys!r}"
    found: Codes | None = snap.memo.get(memo_key)
    if found is None:
        found = snap.memo[memo_key] = Codes(column)
    return found


def by_value(found: Codes, test: Callable[[int], bool]) -> Mask | None:
    """The mask of ``test`` (a test of a position in :attr:`Codes.keys`: the per-slot test
    of the evaluation, given the keys as its column), evaluated once per distinct value;
    ``None`` past :data:`MANY` of them."""
    if len(found.keys) > MANY:
        return None
    return found.mask([test(k) for k in range(len(found.keys))])


def exact_classes(path: FieldPath) -> bool:
    """Whether values equal as keys are the same value for every test (numbers are not:
    1 and 1.0 are one key but two texts)."""
    return path.kind not in _NUMBERS


def grouped(found: Codes, selected: Mask | None) -> list[tuple[Any, int]] | None:
    """``(value, count)`` of each distinct sort value among the selected slots (every
    occupied slot when ``selected`` is ``None``), in order of first appearance; ``None``
    when the codes are not ``bytes``."""
    data = found.codes
    if type(data) is not bytes:
        return None
    if selected is not None:  # unselected slots get the free slots' code (0), not counted
        keep = selected.translate(_SPREAD)
        data = (int.from_bytes(data, "little") & int.from_bytes(keep, "little")).to_bytes(
            len(data), "little"
        )
    out = []
    for k in range(1, len(found.keys)):
        n = data.count(k)
        if n:
            out.append((found.keys[k], n))
    return out
