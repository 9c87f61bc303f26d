"""A list page as the upstream sent it (:class:`Undecoded`), and the list cap's check and
refusal.

The adapter reads a list page into an :class:`Undecoded` (``KubeAdapter.list_body``) and
the large-list scope (:class:`gateway.core.lists.large.LargeLists`) decides what becomes of
it: decoded here in one piece or in slices, or handed to a list worker
(:mod:`gateway.core.lists.pool`), which checks the same cap (:func:`over_cap`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gateway.core import errors

if TYPE_CHECKING:
    from gateway.core.process.metrics import OperationTimer

__all__ = ["Undecoded", "over_cap", "too_many"]


def too_many(cap: int, plural: str) -> errors.RequestEntityTooLarge:
    """The refusal of a list without ``limit`` that holds more than ``cap`` items."""
    return errors.RequestEntityTooLarge(
        f"more than {cap} {plural} match: ask for pages with `limit` and `continue`, or "
        "narrow the list with selectors"
    )


def over_cap(answer: Mapping[str, Any], cap: int) -> bool:
    """Does a list answer asked for ``cap + 1`` items hold more than ``cap``, or promise
    more (a ``continue`` token)?"""
    meta = answer.get("metadata") or {}
    items = answer.get("items") or []
    return bool(meta.get("continue")) or len(items) > cap


class Undecoded:
    """A list body not decoded yet.

    Attributes:
        data: the upstream's JSON body, or, ``gzipped``, that body as the upstream gzipped
            it (``Content-Encoding: gzip``: whoever decodes it inflates it first).
        cap: at most this many items may be answered (0: no cap); more are refused with
            :meth:`refusal`.
        plural: the resource's plural, for the refusal's message.
        feed: the list worker the body was fed to as it arrived (:class:`Feed
            <gateway.core.lists.pool.Feed>`), which holds it, inflated, for the job
            (:meth:`ListWorkers.run <gateway.core.lists.pool.ListWorkers.run>` takes it;
            dropped unused, the worker frees it); ``None``: none was.
        operation: the list operation this body answers, when its block left it to be
            ended by whoever completes the body (:meth:`OperationTimer.later
            <gateway.core.process.metrics.OperationTimer.later>`: a GraphQL list field's,
            ended by its completion with what that raised); ``None``: it was ended.

    It knows nothing of who decodes it: the large-list scope
    (:meth:`gateway.core.lists.large.LargeLists.decoded`) or a list worker.
    """

    __slots__ = ("cap", "data", "feed", "gzipped", "operation", "plural")

    def __init__(
        self,
        data: bytes,
        *,
        gzipped: bool = False,
        cap: int = 0,
        plural: str = "",
        feed: object | None = None,
    ) -> None:
        self.data = data
        self.feed = feed
        self.gzipped = gzipped
        self.cap = cap
        self.plural = plural
        self.operation: OperationTimer | None = None

    def refusal(self) -> errors.RequestEntityTooLarge:
        return too_many(self.cap, self.plural)
