"""What every call brings along: the caller's credential and its deadline.

The token comes from the ``authorization: Bearer <token>`` metadata and travels upstream as
the caller's own :class:`~gateway.core.upstream.credentials.Credential`; it is never logged.  A
call's deadline becomes the upstream request timeout, so the upstream gives up when the
caller has, and a unary call's whole answer is bounded by it (:class:`Deadline`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, Final

from gateway.core import (
    ANONYMOUS,
    Credential,
    credential_of_authorization,
    errors,
    refuse_impersonation,
)

__all__ = ["Deadline", "credential_of", "timeout_of"]

#: Upstream requests end this much before the caller's deadline, so the caller gets our
#: DEADLINE_EXCEEDED (with details) rather than a bare cancellation.
DEADLINE_MARGIN: Final = 0.05


def credential_of(metadata: Iterable[tuple[str, Any]] | None) -> Credential:
    """The caller's credential from call metadata (no ``authorization``: anonymous).

    Raises:
        Forbidden: a metadata key names an impersonation header (``impersonate-*``):
            callers cannot choose whom the gateway impersonates.
        Unauthorized: ``authorization`` is present but not ``Bearer <token>`` with a
            well-formed token.
    """
    refuse_impersonation((key for key, _ in metadata or ()), "gRPC metadata key")
    for key, value in metadata or ():
        if key.lower() == "authorization":
            return credential_of_authorization(value if isinstance(value, bytes) else str(value))
    return ANONYMOUS


def timeout_of(remaining: float | None) -> float | None:
    """The upstream timeout for a call with ``remaining`` seconds (``None``: no deadline).

    Raises:
        Timeout: the deadline has already passed.
    """
    if remaining is None:
        return None
    if remaining <= DEADLINE_MARGIN:
        raise errors.Timeout("the call's deadline passed before the upstream was asked")
    return remaining - DEADLINE_MARGIN


class Deadline:
    """The end of a call's time, ``timeout`` seconds from now: the task serving the call (the
    current one) is cancelled then, as ``asyncio.timeout`` would, and :meth:`end` says
    whether what the task's await raised is that cancellation.

    ``asyncio.timeout``'s work for one await of a unary call, without its state machine,
    its context manager's awaits and its reschedule (a unary call makes one each: ~2.5
    against ~8 us of the loop's CPU).  :meth:`end` must be called once the await is over,
    however it ended (it stops the timer, and takes back the cancellation it made).
    """

    __slots__ = ("_cancelling", "_fired", "_handle", "_task")

    def __init__(self, timeout: float) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a Deadline bounds the await of a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._fired = False
        self._handle = asyncio.get_running_loop().call_later(timeout, self._fire)

    def _fire(self) -> None:
        self._fired = True
        self._task.cancel()

    def end(self, failure: BaseException | None = None) -> bool:
        """Stop the timer; ``True``: ``failure`` (what the await raised, ``None``: nothing) is
        the cancellation the deadline made (the caller raises its ``Timeout``)."""
        self._handle.cancel()
        if not self._fired:
            return False
        self._fired = False
        return self._task.uncancel() <= self._cancelling and isinstance(
            failure, asyncio.CancelledError
        )
