"""May this caller watch that?  The cluster's own authorizer answers, briefly cached.

With shared watches (``--shared-watches``) one upstream watch, made with the gateway's own
credential, serves subscribers of many identities.  Each subscriber is admitted only after
SelfSubjectAccessReviews made with its *own* token say it may ``list`` and ``watch`` the
resource in that namespace (or in every namespace): exactly what the apiserver would check
for the watch the subscriber asked for.  Selectors do not matter to RBAC, so they do not
matter here.

Answers are cached under a hash of the token (never the token) for at most ``ttl``
seconds, in a bounded table; concurrent questions about the same key share one review.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable

from gateway.core import errors
from gateway.core.adapter import KubeAdapter
from gateway.core.budget import scope_of
from gateway.core.credentials import Credential
from gateway.core.registry import Resource

Key = tuple[str, str, str | None]


class AccessReviews:
    """Cached answers to "may this caller list and watch this resource here?".

    Args:
        adapter: the adapter reviews are made through (with each caller's credential).
        ttl: seconds an answer is reused.
        max_entries: answers kept at most (the oldest go first).
    """

    def __init__(
        self,
        adapter: KubeAdapter,
        *,
        ttl: float = 30.0,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.adapter = adapter
        self.ttl = ttl
        self.max_entries = max_entries
        self._clock = clock
        self._answers: OrderedDict[Key, tuple[bool, float]] = OrderedDict()
        self._asking: dict[Key, asyncio.Future[bool]] = {}
        #: Reviews actually sent upstream (each is a list and a watch question).
        self.reviews = 0

    async def may_watch(
        self,
        credential: Credential,
        resource: Resource,
        namespace: str | None,
        *,
        fresh: bool = False,
    ) -> bool:
        """Whether the caller may list and watch ``resource`` in ``namespace``.

        Args:
            fresh: ask the upstream even when a cached answer is still valid.

        Raises:
            GatewayError: the review failed (401 for a rejected token, 503...).
        """
        key = (scope_of(credential), resource.key, namespace)
        if not fresh:
            cached = self._answers.get(key)
            if cached is not None and cached[1] > self._clock():
                return cached[0]
        while (asking := self._asking.get(key)) is not None:
            try:
                return await asyncio.shield(asking)
            except asyncio.CancelledError:
                if not asking.cancelled():
                    raise  # we were cancelled
                # the one asking went away: ask again
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._asking[key] = future
        try:
            self.reviews += 1
            verbs = await asyncio.gather(
                self.adapter.access_review(
                    resource, "list", namespace=namespace, credential=credential
                ),
                self.adapter.access_review(
                    resource, "watch", namespace=namespace, credential=credential
                ),
            )
            allowed = all(verbs)
            self._remember(key, allowed)
            future.set_result(allowed)
            return allowed
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            del self._asking[key]

    def _remember(self, key: Key, allowed: bool) -> None:
        self._answers[key] = (allowed, self._clock() + self.ttl)
        self._answers.move_to_end(key)
        while len(self._answers) > self.max_entries:
            self._answers.popitem(last=False)


def forbidden(resource: Resource, namespace: str | None) -> errors.Forbidden:
    """The refusal of a watch the caller may not make, worded as the apiserver words it."""
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    reason = (
        f"{resource.plural}{'.' + resource.group if resource.group else ''} is forbidden: "
        f'the caller cannot watch resource "{resource.plural}" in API group '
        f'"{resource.group}" {where}'
    )
    return errors.Forbidden(
        reason, details={"kind": resource.plural, "group": resource.group, "name": ""}
    )
