"""May this caller watch that?  The cluster's own authorizer answers, briefly cached.

With shared watches (``--shared-watches``) one upstream watch, made with the gateway's own
credential, serves subscribers of many identities.  Each subscriber is admitted only after
SelfSubjectAccessReviews made as *itself* say it may ``list`` and ``watch`` the resource in
that namespace (or in every namespace): exactly what the apiserver would check for the
watch the subscriber asked for.  Selectors do not matter to RBAC, so they do not matter
here.

"As itself" is the caller's credential as every other call of that caller carries it: its
token in forward mode; in impersonate mode the cluster's own gateway credential with the
caller's ``Impersonate-*`` headers, so the review asks about the impersonated user on the
cluster the watch is on (a SelfSubjectAccessReview under impersonation is answered for the
impersonated user; it needs no right beyond ``impersonate``, where a SubjectAccessReview
by the gateway would need ``create subjectaccessreviews`` and could be asked about anyone).

Answers are cached under :func:`~gateway.core.upstream.budget.scope_of` the credential (a hash of
the
token or of the impersonated user, never the token) for at most ``ttl`` seconds, in a
bounded table; concurrent questions about the same key share one review.

A review made with a token the gateway does not know yet is how the gateway learns who that
token is, so it draws on the one budget of reviews of new callers
(:class:`~gateway.core.upstream.budget.Newcomers`, ``--max-new-caller-reviews``, shared
with cluster visibility's reviews and impersonate mode's TokenReviews): a flood of fresh
random tokens at views or shared watches is refused with ``RESOURCE_EXHAUSTED`` past it,
nothing sent, never turned into a flood of upstream reviews.  A caller a review answered
(the cluster authenticated its token) is known from then on and passes free.  In
impersonate mode a caller's token reaches no cluster: every review of it goes through the
home cluster's TokenReview, which draws on the same budget, so the access review does not
draw again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from gateway.core import errors
from gateway.core.model.registry import Resource
from gateway.core.support.cache import Answers
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.budget import Newcomers, scope_of
from gateway.core.upstream.credentials import Credential
from gateway.core.upstream.identity import FORWARD

Key = tuple[str, str, str | None]


class AccessReviews:
    """Cached answers to "may this caller list and watch this resource here?".

    Args:
        adapter: the adapter reviews are made through (with each caller's credential).
        newcomers: the one budget of reviews of callers not known yet
            (``--max-new-caller-reviews``; default: one of its own, 20 a second).
        ttl: seconds an answer is reused.
        max_entries: answers kept at most (the oldest go first).
    """

    def __init__(
        self,
        adapter: KubeAdapter,
        *,
        newcomers: Newcomers | None = None,
        ttl: float = 30.0,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.adapter = adapter
        self.newcomers = newcomers if newcomers is not None else Newcomers(clock=clock)
        self.ttl = ttl
        self._answers: Answers[Key, bool] = Answers(max_entries=max_entries, clock=clock)
        self._sent = 0

    @property
    def reviews(self) -> int:
        """Reviews actually sent upstream (each is a list and a watch question; one the
        budget of new callers refused sent nothing and is not counted)."""
        return self._sent

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
            ResourceExhausted: the caller is not known yet and the budget of reviews of
                new callers is spent (nothing was sent).
            GatewayError: the review failed (401 for a rejected token, 503...).
        """
        scope = scope_of(credential)

        async def ask() -> tuple[bool, float]:
            if self.adapter.identity.mode == FORWARD:  # else the TokenReview's admission
                self.newcomers.admit(scope)
            self._sent += 1
            verbs = await asyncio.gather(
                self.adapter.access_review(
                    resource, "list", namespace=namespace, credential=credential
                ),
                self.adapter.access_review(
                    resource, "watch", namespace=namespace, credential=credential
                ),
            )
            self.newcomers.remember(scope)  # answered: the cluster authenticated the caller
            return all(verbs), self.ttl

        key = (scope, resource.key, namespace)
        return await self._answers.get(key, ask, fresh=fresh)


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
