"""A text column's character pairs (bigrams), kept by the store per change: how many texts
hold a needle, without reading them all.

A view's one substring test (:class:`~gateway.core.views.evaluate.Finder`) finds a page
in a few kilobytes of its texts from the cursor on, but its ``total`` was one
regular-expression count over every text (30,000 pod names, about 860 KB: ~0.45 ms of
each distinct view's CPU).  Here each text's distinct bigrams map to the set of slots
whose text holds them (:class:`Grams`): a needle of two characters is held by exactly
the texts of its bigram's set (its size is the count); a longer one by a subset of the
intersection of its bigrams' sets, each such candidate verified (``needle in text``,
C-level).  A needle of one character, or one whose rarest bigram is held by too many
texts (:data:`MAX_CANDIDATES`), is counted the regular-expression way (the caller's
fallback, ``None`` here).

Kept up to date by :class:`~gateway.core.views.store.Store` on every put and delete (a
text's old bigrams' sets lose its slot, its new ones gain it: a few microseconds a
change, measured in ``tests/core/views/test_grams.py``); read only at the generation it
reflects (:meth:`Grams.count`: a snapshot of an earlier generation is counted the other
way), and under a sequence number that a change makes odd while it runs, so that a
count in a worker thread never reads a change half done.  Its memory (an estimate per
set entry, :data:`ENTRY_BYTES`) is counted in the store's bytes, as the JSON is.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from typing import Any, Final

#: What one set entry (a slot in a bigram's set) costs, with the sets' spare room and the
#: slots' own integers (measured with ``tracemalloc`` on the bench's 30,000 pod names:
#: 48.7 MB for 758,000 entries, against 99 MB of their pods' JSON).
ENTRY_BYTES: Final = 64
#: What a slot costs besides (its text's reference in :attr:`Grams.texts`).
SLOT_BYTES: Final = 8
#: Candidates (the rarest bigram's texts) past which a longer needle is counted by the
#: regular expression instead (intersecting and verifying them would cost about as much:
#: ~0.1 ms for a thousand, against ~0.45 ms for the expression over 30,000 names).
MAX_CANDIDATES: Final = 1024


def bigrams(text: str) -> set[str]:
    """The distinct pairs of consecutive characters of ``text``."""
    return {text[i : i + 2] for i in range(len(text) - 1)}


def text_of(value: tuple[int, Any] | None) -> str:
    """A column's value as the texts a substring test reads (``""``: absent, or not text
    of the field's type), as :func:`gateway.core.views.evaluate._texts` reads it."""
    if value is not None and value[0] == 1 and type(value[1]) is str:
        return value[1]
    return ""


class Grams:
    """The bigrams of one text column's slots (see the module)."""

    __slots__ = ("at", "built", "entries", "postings", "sequence", "texts")

    def __init__(self) -> None:
        #: Each bigram's slots (whose text holds it).
        self.postings: dict[str, set[int]] = {}
        #: Each slot's text as indexed (``""``: none).
        self.texts: list[str] = []
        #: Slots in all the sets together (what :attr:`bytes` counts).
        self.entries = 0
        #: The store generation the sets reflect (set by the store after each change).
        self.at = -1
        #: Odd while a change runs (a reader in another thread compares it before and after).
        self.sequence = 0
        #: Every slot indexed (a build done): only then read.
        self.built = False

    @property
    def bytes(self) -> int:
        """An estimate of its memory (what the store counts)."""
        return self.entries * ENTRY_BYTES + len(self.texts) * SLOT_BYTES

    def extend(self, texts: Iterable[str]) -> None:
        """Index the texts of the next slots (a build, slice by slice)."""
        postings = self.postings
        add_text = self.texts.append
        entries = 0
        for text in texts:
            slot = len(self.texts)
            add_text(text)
            for gram in bigrams(text):
                found = postings.get(gram)
                if found is None:
                    postings[gram] = {slot}
                else:
                    found.add(slot)
                entries += 1
        self.entries += entries

    def replace(self, slot: int, text: str) -> int:
        """Index ``slot``'s new text (``""``: none); returns the change in :attr:`bytes`.
        A slot not indexed yet is left to the build while one runs (it reaches it); once
        built, a new slot is added."""
        texts = self.texts
        added = 0
        if slot >= len(texts):
            if not self.built:
                return 0
            added = slot + 1 - len(texts)
            texts.extend([""] * added)
        old = texts[slot]
        if old == text:
            return added * SLOT_BYTES
        self.sequence += 1  # odd: a change runs
        try:
            before, after = bigrams(old), bigrams(text)
            postings = self.postings
            for gram in before - after:
                held = postings[gram]
                held.discard(slot)
                if not held:
                    del postings[gram]
            for gram in after - before:
                found = postings.get(gram)
                if found is None:
                    postings[gram] = {slot}
                else:
                    found.add(slot)
            texts[slot] = text
            grown = len(after) - len(before)
            self.entries += grown
        finally:
            self.sequence += 1
        return grown * ENTRY_BYTES + added * SLOT_BYTES

    def count(self, needle: str, generation: int) -> int | None:
        """How many texts hold ``needle``, at store ``generation``; ``None`` where this
        does not tell (a needle of one character, candidates past :data:`MAX_CANDIDATES`,
        another generation, a change running meanwhile): the caller counts another way."""
        if len(needle) < 2:
            return None
        sequence = self.sequence
        if sequence & 1 or self.at != generation or not self.built:
            return None
        postings = self.postings
        sets = []
        for gram in bigrams(needle):
            found = postings.get(gram)
            if found is None:
                return 0 if self.sequence == sequence else None
            sets.append(found)
        try:
            if len(needle) == 2:
                counted = len(sets[0])
            else:
                sets.sort(key=len)
                if len(sets[0]) > MAX_CANDIDATES:
                    return None
                candidates = sets[0].intersection(*sets[1:])  # C-level, in one step
                texts = self.texts
                counted = sum(
                    map(str.__contains__, map(texts.__getitem__, candidates), repeat(needle))
                )
        except (RuntimeError, IndexError):  # changed under it (a worker thread's read)
            return None
        if self.sequence != sequence or self.at != generation:
            return None
        return counted
