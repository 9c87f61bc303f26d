"""Who a caller is across clusters: forwarded as is, or authenticated once and impersonated.

Two modes (``--identity``):

- ``forward`` (the default, :data:`FORWARDING`): the caller's bearer token travels to
  each cluster it calls (it works when every cluster trusts one identity provider).
- ``impersonate`` (:class:`Impersonating`): the gateway asks its *home* cluster
  (``--home-cluster``) who the token is, once, with a TokenReview made with the gateway's
  own credential there (:class:`TokenReviews`, through the home cluster's
  :meth:`KubeAdapter.review_token <gateway.core.upstream.adapter.KubeAdapter.review_token>`),
  and then calls every cluster with *that cluster's* own gateway credential plus
  ``Impersonate-User``/``-Group``/``-Uid``/``-Extra-*`` headers
  (:class:`ImpersonatingAuth`), so each cluster's RBAC decides for that user.  The caller's
  token goes to no cluster but inside the home cluster's TokenReview body.

The mode is one explicit object, an :class:`Identity`: the composition root
(:mod:`gateway.runtime`) builds it once, makes every cluster's caller clients with its
:attr:`~Identity.client_auth` and hands it to every cluster's adapter
(``KubeAdapter.identity``), where the front ends ask it who a caller is
(:meth:`Identity.identified`).  Nothing finds the mode by looking at a client's auth.

In both modes a caller may never choose whom the gateway impersonates: a header, gRPC
metadata key or ``connection_init`` key named ``Impersonate-*`` is refused before anything
is sent upstream (:func:`refuse_impersonation`).  In forward mode the apiserver would
honour such a header for a caller allowed to impersonate; the gateway does not pass it on
all the same, so its two modes refuse the same requests.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import time
import weakref
from collections.abc import AsyncGenerator, Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import httpx

from gateway.core import errors
from gateway.core.support.cache import Answers
from gateway.core.upstream.budget import Newcomers
from gateway.core.upstream.credentials import NO_CREDENTIAL_HINT, Credential, Endable, UserInfo


class Reviewer(Protocol):
    """What token reviews need of the home cluster's adapter
    (:class:`~gateway.core.upstream.adapter.KubeAdapter` is one): its TokenReview, and its
    server's address."""

    @property
    def http(self) -> httpx.AsyncClient: ...

    async def review_token(
        self, token: str, *, audiences: tuple[str, ...] = (), timeout: float | None = 10.0
    ) -> Mapping[str, Any]: ...


class _Served(Protocol):
    @property
    def adapter(self) -> Reviewer: ...


class Clusters(Protocol):
    """What token reviews read of the served clusters (the fleet, a layer above, is one,
    built before them): the home cluster's adapter, by name."""

    def names(self) -> list[str]: ...

    def get(self, name: str | None = None) -> _Served: ...


__all__ = [
    "FORWARD",
    "FORWARDING",
    "IMPERSONATE",
    "Carrying",
    "Forwarding",
    "Identity",
    "Impersonating",
    "ImpersonatingAuth",
    "TokenProof",
    "TokenReviews",
    "refuse_impersonation",
]

log = logging.getLogger(__name__)

FORWARD: Final = "forward"
IMPERSONATE: Final = "impersonate"
MODES: Final = (FORWARD, IMPERSONATE)

#: The request extension that marks a request as the gateway's own on a client whose
#: callers are impersonated (the TokenReview itself): it goes out as the gateway.
OWN_REQUEST: Final = "kube_gateway_own"

#: What a request may ask as the gateway itself on an impersonating client without saying
#: so: the cluster's readiness and version (public by default, see ``Readiness``).
_PUBLIC_PATHS: Final = frozenset({"/readyz", "/livez", "/healthz", "/version"})

TOKEN_REVIEW_PATH: Final = "/apis/authentication.k8s.io/v1/tokenreviews"

#: The most seconds an authenticated token's user is reused without asking again.
MAX_TTL: Final = 60.0
#: Seconds a refused token stays refused without asking again (short: a token minted a
#: moment ago may not be known to every apiserver yet).
NEGATIVE_TTL: Final = 5.0
#: The only ``system:`` group carried to clusters other than the home cluster by default.
AUTHENTICATED: Final = "system:authenticated"


def refuse_impersonation(names: Iterable[str], where: str) -> None:
    """Refuse a caller that sends any ``Impersonate-*`` header (any case).

    Args:
        names: the header, metadata or payload key names the caller sent.
        where: what they were, for the message (``"header"``, ``"gRPC metadata"``...).

    Raises:
        Forbidden: one of them is an impersonation header.
    """
    for name in names:
        if isinstance(name, str) and name.lower().startswith("impersonate-"):
            raise errors.Forbidden(
                f"the {where} {name!r} is refused: callers cannot choose the identity the "
                "gateway calls clusters as (it sends Impersonate-* headers itself, in "
                "impersonate mode, for the user its home cluster authenticated)",
                reason="Forbidden",
            )


def _jwt_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT, unverified (``None``: not a JWT or no ``exp``).

    Only ever used to keep a review's answer *shorter*: a token that expires in ten seconds
    is not taken as valid for sixty.
    """
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, UnicodeDecodeError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str))


def user_of_review(status: Mapping[str, Any], audiences: tuple[str, ...] = ()) -> UserInfo | None:
    """The user of a TokenReview's ``status`` (``None``: not authenticated).

    ``audiences``: those the review asked for (``spec.audiences``); then the token counts
    only when ``status.audiences`` names one of them (an empty one means the reviewer is
    not audience-aware, or the token is the apiserver's own: not asked for, refused).
    """
    user = status.get("user")
    if status.get("authenticated") is not True or not isinstance(user, Mapping):
        return None
    if audiences and not set(_strings(status.get("audiences"))) & set(audiences):
        return None
    username = user.get("username")
    if not isinstance(username, str) or not username:
        return None
    uid = user.get("uid")
    extra = user.get("extra")
    return UserInfo(
        username=username,
        uid=uid if isinstance(uid, str) else "",
        groups=_strings(user.get("groups")),
        extra=tuple(
            sorted((k, _strings(v)) for k, v in extra.items() if isinstance(k, str))
            if isinstance(extra, Mapping)
            else ()
        ),
    )


@dataclass(frozen=True, slots=True)
class Carrying:
    """What of the home cluster's user is impersonated on the *other* clusters.

    The home cluster sees the caller exactly as its TokenReview said.  A name that starts
    with ``system:`` means a different principal on every cluster (``system:masters``,
    ``system:serviceaccounts:<ns>``, a node, a control-plane component, a ServiceAccount
    ``system:serviceaccount:<ns>:<name>``), so by default another cluster gets:

    - of the ``system:`` groups, only ``system:authenticated`` (``system_groups``; ``*``
      carries every one); other groups as they are;
    - no ``system:`` user: such a caller is refused there with ``Forbidden`` before any
      request is sent (``system_users``: carry them as they are);
    - user name, uid and extras as they are (an extra never grants in RBAC; some narrow,
      as a token's scopes do, so none is ever dropped).

    Args:
        system_groups: the ``system:`` groups carried (``*``: all of them).
        system_users: carry ``system:`` user names too.
    """

    system_groups: frozenset[str] = frozenset({AUTHENTICATED})
    system_users: bool = False

    def carries(self, group: str) -> bool:
        """Whether ``group`` goes to a cluster other than the home cluster."""
        return (
            not group.startswith("system:")
            or "*" in self.system_groups
            or group in self.system_groups
        )

    def apply(self, headers: httpx.Headers) -> None:
        """Map the ``Impersonate-*`` headers of a request to a cluster other than the home
        cluster (in place).

        Raises:
            Forbidden: the user is a ``system:`` one, not carried.
        """
        user = headers.get("impersonate-user")
        if user is None:
            return
        if user.startswith("system:") and not self.system_users:
            raise errors.Forbidden(
                f'the user "{user}" is not carried to this cluster: a name that starts with '
                '"system:" is a different principal on each cluster; only the home cluster '
                "serves it (see --impersonate-system-users)",
                reason="Forbidden",
            )
        raw = [v for k, v in headers.raw if k.lower() == b"impersonate-group"]
        kept = [v for v in raw if self.carries(v.decode("utf-8", "replace"))]
        if len(kept) != len(raw):
            del headers["impersonate-group"]
            headers.update([(b"Impersonate-Group", v) for v in kept])


class TokenProof:
    """That a caller's token was authenticated, and how to check it again while the
    caller's streams run (see :meth:`TokenReviews.follow`).  Never prints the token."""

    __slots__ = ("_token", "reviews", "user")

    def __init__(self, reviews: TokenReviews, token: str, user: UserInfo) -> None:
        self.reviews = reviews
        self._token = token
        self.user = user

    def __repr__(self) -> str:
        return "TokenProof(<token>)"

    def follow(self, stream: Endable) -> None:
        """End ``stream`` with ``Unauthorized`` once the token is refused or expires."""
        self.reviews.follow(self._token, self.user, stream)


class _Followed:
    """The streams of one token (by its hash), and the task that checks it again."""

    __slots__ = ("expiry", "streams", "task", "token", "user")

    def __init__(self, token: str, user: UserInfo, expiry: float | None) -> None:
        self.token = token
        self.user = user
        self.expiry = expiry
        self.streams: weakref.WeakSet[Endable] = weakref.WeakSet()
        self.task: asyncio.Task[None] | None = None


def _token_key(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class TokenReviews:
    """Who a bearer token is, as the home cluster's TokenReview says, briefly kept.

    Answers are kept under the SHA-256 of the token (never the token) for at most
    ``min(ttl, recheck)`` seconds (less when the token is a JWT that expires sooner),
    refusals for ``negative_ttl``; concurrent first lookups of one token share one review,
    and at most ``max_entries`` answers are kept.  A review that fails (the home cluster
    unreachable, or refusing the gateway) is not kept.

    A running stream of an authenticated caller (a subscription, a followed log) is
    *followed* (:meth:`follow`): its token is looked up again every ``recheck`` seconds
    (through the kept answers, so one token costs one review per period however many
    streams it has), and at its JWT ``exp``; once the home cluster refuses it (revoked,
    expired, its ServiceAccount deleted) or the ``exp`` passed, every stream of that token
    is ended with ``Unauthorized``.  The ``exp`` is read without verifying it, only ever to
    end a stream earlier, never to admit anything.

    Args:
        home: the name of the home cluster (looked up in ``clusters`` at every review, so
            a home cluster rebuilt with a new kubeconfig is used at once).
        clusters: the served clusters (the fleet, built before the clusters whose clients
            carry these reviews: construction order, no later binding).
        newcomers: the one budget of reviews of callers not known yet
            (``--max-new-caller-reviews``, shared with visibility's reviews; default: one
            of its own).
        ttl: the most seconds an authenticated user is reused.
        negative_ttl: seconds a refused token stays refused.
        max_entries: answers kept at most.
        recheck: seconds between two checks of a token whose streams run.
        audiences: the TokenReview's ``spec.audiences`` (``()``: none, the apiserver's own);
            a token counts only when the review says it is for one of them.
        carrying: what other clusters get of the user (:class:`Carrying`).
        clock: monotonic clock, in seconds.
        wall: the time of day, in seconds since the epoch (for a JWT's ``exp``).
    """

    def __init__(
        self,
        home: str,
        clusters: Clusters,
        *,
        newcomers: Newcomers | None = None,
        ttl: float = MAX_TTL,
        negative_ttl: float = NEGATIVE_TTL,
        max_entries: int = 10_000,
        recheck: float = MAX_TTL,
        audiences: tuple[str, ...] = (),
        carrying: Carrying = Carrying(),
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.home = home
        self.ttl = min(ttl, recheck)
        self.negative_ttl = negative_ttl
        self.recheck = recheck
        self.audiences = audiences
        self.carrying = carrying
        self.wall = wall
        self.clusters = clusters
        self.newcomers = newcomers if newcomers is not None else Newcomers(clock=clock)
        self._answers: Answers[str, UserInfo | None] = Answers(max_entries=max_entries, clock=clock)
        self._followed: dict[str, _Followed] = {}
        #: Streams ended because their token was refused or expired.
        self.ended = 0

    @property
    def reviews(self) -> int:
        """TokenReviews actually sent to the home cluster."""
        return self._answers.asked

    @property
    def followed(self) -> int:
        """Tokens whose streams are followed now."""
        return len(self._followed)

    def __len__(self) -> int:
        return len(self._answers)

    async def user_of(self, token: str) -> UserInfo:
        """The user ``token`` authenticates as on the home cluster.

        Raises:
            Unauthorized: the home cluster does not authenticate it (the answer a cluster
                gives a caller whose token it refuses: nothing was sent anywhere else).
            Unavailable: the home cluster is not served, unreachable, or refuses the
                gateway's review (its identity there lacks ``create tokenreviews``).
        """

        key = _token_key(token)
        newcomers = self.newcomers

        async def ask() -> tuple[UserInfo | None, float]:
            # A token not reviewed lately draws on the one budget of new callers' reviews
            # (ResourceExhausted past it, nothing sent): random tokens cannot amplify.
            newcomers.admit(key)
            user = await self._review(token)
            if user is None:
                return None, self.negative_ttl
            newcomers.remember(key)
            ttl = self.ttl
            expiry = _jwt_expiry(token)
            if expiry is not None:
                ttl = min(ttl, expiry - self.wall())
            return user, ttl

        user = await self._answers.get(key, ask)
        if user is None:
            raise errors.Unauthorized("Unauthorized", reason="Unauthorized")
        return user

    def proof(self, token: str, user: UserInfo) -> TokenProof:
        """The proof that ``token`` authenticated as ``user``, to follow its streams by."""
        return TokenProof(self, token, user)

    def follow(self, token: str, user: UserInfo, stream: Endable) -> None:
        """End ``stream`` with ``Unauthorized`` once ``token`` is refused or expires (or
        authenticates as another user).  Held weakly: a stream its reader dropped is gone,
        and a token without streams is no longer checked."""
        key = _token_key(token)
        entry = self._followed.get(key)
        if entry is None:
            entry = self._followed[key] = _Followed(token, user, _jwt_expiry(token))
            entry.task = asyncio.create_task(self._check(key, entry), name="token-recheck")
        entry.streams.add(stream)

    async def _check(self, key: str, entry: _Followed) -> None:
        try:
            while True:
                delay = self.recheck
                if entry.expiry is not None:
                    delay = min(delay, entry.expiry - self.wall())
                if delay > 0:
                    await asyncio.sleep(delay)
                if not any(not s.closed for s in entry.streams):
                    return  # nobody reads them any more
                if entry.expiry is not None and self.wall() >= entry.expiry:
                    error = errors.Unauthorized(
                        "Unauthorized: the token expired", reason="Unauthorized"
                    )
                else:
                    try:
                        user = await self.user_of(entry.token)
                    except errors.Unauthorized:
                        user = None
                    except errors.GatewayError as exc:
                        # the home cluster cannot answer now: keep them, ask next time
                        log.warning("a token of running streams cannot be checked: %s", exc)
                        continue
                    if user == entry.user:
                        continue
                    error = errors.Unauthorized(
                        "Unauthorized: the token is no longer valid", reason="Unauthorized"
                    )
                for stream in list(entry.streams):
                    if not stream.closed:
                        self.ended += 1
                        stream.end(error)
                return
        finally:
            if self._followed.get(key) is entry:
                del self._followed[key]

    async def aclose(self) -> None:
        """Stop checking tokens (the gateway stops)."""
        tasks = [e.task for e in self._followed.values() if e.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def is_home(self, url: httpx.URL) -> bool:
        """Whether ``url`` is on the home cluster's server (same scheme, host and port;
        the ``default`` cluster and ``--cluster a=`` of one kubeconfig are one cluster)."""
        if self.home not in self.clusters.names():
            return False
        home = self.clusters.get(self.home).adapter.http.base_url
        return (url.scheme, url.host, url.port) == (home.scheme, home.host, home.port)

    def _home(self) -> Reviewer:
        if self.home not in self.clusters.names():
            raise errors.Unavailable(
                f'the home cluster "{self.home}", which authenticates callers, is not served '
                "(yet): retry later"
            )
        return self.clusters.get(self.home).adapter

    async def _review(self, token: str) -> UserInfo | None:
        adapter = self._home()
        try:
            status = await adapter.review_token(token, audiences=self.audiences, timeout=10.0)
        except errors.GatewayError as exc:
            cause = exc.__cause__
            if cause is not None:  # no answer: the transport (or the gateway's credential)
                raise errors.Unavailable(
                    f'the home cluster "{self.home}" cannot be reached to authenticate the '
                    f"caller: {type(cause).__name__}"
                ) from exc
            log.error(
                "home cluster %s answered the gateway's TokenReview with %d: the gateway's "
                "identity there needs 'create' on tokenreviews (system:auth-delegator)",
                self.home,
                exc.status_code,
            )
            raise errors.Unavailable(
                f'the home cluster "{self.home}" refused to authenticate the caller '
                f"(TokenReview answered {exc.status_code})"
            ) from None
        return user_of_review(status, self.audiences)


def _bearer(value: str) -> str | None:
    scheme, _, token = value.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class ImpersonatingAuth(httpx.Auth):
    """The auth of a cluster's caller clients in impersonate mode.

    Every request leaves as the cluster's own gateway credential (``own``: its token,
    exec plugin or, with ``None``, the client certificate in the TLS context) plus the
    caller's ``Impersonate-*`` headers:

    - a request with impersonation headers (a credential the front end already
      authenticated) keeps them;
    - a request with the caller's ``Authorization`` is authenticated here (the home
      cluster's TokenReview, kept) and the token is *removed*: it never reaches a cluster;
    - a request with neither is a caller without a credential, refused with the hint a
      cluster's 401 would get; only a request marked as the gateway's own (the TokenReview)
      or a ``GET`` of the cluster's readiness or version goes out as the gateway itself.

    So a caller never borrows the gateway's identity, whatever path its request took.
    """

    def __init__(self, reviews: TokenReviews, own: httpx.Auth | None) -> None:
        self.reviews = reviews
        self.own = own

    def __repr__(self) -> str:
        return f"ImpersonatingAuth(home={self.reviews.home!r}, own={self.own!r})"

    def sync_auth_flow(
        self, request: httpx.Request
    ) -> Generator[httpx.Request, httpx.Response, None]:
        """Refuse: the gateway's client is async only."""
        raise RuntimeError("ImpersonatingAuth works with httpx.AsyncClient only")

    async def _impersonate(self, request: httpx.Request) -> None:
        if request.extensions.get(OWN_REQUEST):
            return
        authorization = request.headers.get("Authorization")
        if authorization is not None:
            del request.headers["Authorization"]
            for name in [n for n in request.headers if n.lower().startswith("impersonate-")]:
                del request.headers[name]
            token = _bearer(authorization)
            if token is None:
                raise errors.Unauthorized(
                    "the Authorization value must be 'Bearer <token>'", reason="Unauthorized"
                )
            # one header per group (``update`` keeps repeated names of what it is given)
            request.headers.update((await self.reviews.user_of(token)).headers())
            self._carry(request)
            return
        if "Impersonate-User" in request.headers:
            self._carry(request)
            return
        if request.method == "GET" and request.url.path in _PUBLIC_PATHS:
            return
        raise errors.Unauthorized(f"Unauthorized: {NO_CREDENTIAL_HINT}", reason="Unauthorized")

    def _carry(self, request: httpx.Request) -> None:
        """The home cluster gets the user as it was authenticated; another cluster what
        :class:`Carrying` lets through."""
        if not self.reviews.is_home(request.url):
            self.reviews.carrying.apply(request.headers)

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        """Impersonate the caller (or refuse it), then add the gateway's own credential."""
        await self._impersonate(request)
        if self.own is None:  # a client certificate: nothing to add
            yield request
            return
        flow = self.own.async_auth_flow(request)
        sent = await flow.__anext__()
        while True:
            response = yield sent
            try:
                sent = await flow.asend(response)
            except StopAsyncIteration:
                return


class Identity(Protocol):
    """How the gateway calls clusters as its callers: one object, the mode's
    (:data:`FORWARDING` or :class:`Impersonating`), built by the composition root, which
    makes every cluster's caller clients with :attr:`client_auth` and hands it to every
    cluster's adapter (``KubeAdapter.identity``) for the front ends to ask."""

    @property
    def mode(self) -> str:
        """:data:`FORWARD` or :data:`IMPERSONATE` (``--identity``)."""
        ...

    @property
    def client_auth(self) -> Callable[[httpx.Auth | None], httpx.Auth] | None:
        """What makes a caller client's auth from the cluster's own gateway credential
        (``None``: the client carries each caller's own credential)."""
        ...

    async def identified(self, credential: Credential) -> Credential:
        """``credential`` as a cluster is called with it."""
        ...

    async def aclose(self) -> None:
        """Stop what runs in the background (the gateway stops)."""
        ...


class Forwarding:
    """Forward mode: each caller's own credential travels to each cluster it calls, and
    is what budgets, shared subscriptions and access reviews key on."""

    mode: Final = FORWARD
    client_auth: Final = None

    def __repr__(self) -> str:
        return "Forwarding()"

    async def identified(self, credential: Credential) -> Credential:
        """``credential`` itself."""
        return credential

    async def aclose(self) -> None:
        """Nothing runs."""


#: The forward mode (stateless: one for every adapter that is not told otherwise).
FORWARDING: Final = Forwarding()


class Impersonating:
    """Impersonate mode: callers authenticated by ``reviews`` (the home cluster's
    TokenReviews), every cluster called with its own gateway credential plus the caller's
    ``Impersonate-*`` headers (:class:`ImpersonatingAuth`, made by :attr:`client_auth`)."""

    mode: Final = IMPERSONATE

    def __init__(self, reviews: TokenReviews) -> None:
        self.reviews = reviews

    def __repr__(self) -> str:
        return f"Impersonating(home={self.reviews.home!r})"

    @property
    def client_auth(self) -> Callable[[httpx.Auth | None], httpx.Auth]:
        """An :class:`ImpersonatingAuth` over :attr:`reviews` and the gateway's own auth."""
        return self._auth

    def _auth(self, own: httpx.Auth | None) -> httpx.Auth:
        return ImpersonatingAuth(self.reviews, own)

    async def identified(self, credential: Credential) -> Credential:
        """``credential`` as clusters are called with it: a token the home cluster
        authenticates becomes its user (so budgets, shared subscriptions and access
        reviews key on the user, and the token travels no further); anything else is
        returned as it is (a refused or anonymous caller, whom the first upstream call
        refuses with the answer a cluster gives)."""
        token = credential.token
        if token is None:
            return credential
        try:
            user = await self.reviews.user_of(token)
        except errors.GatewayError:
            return credential
        return Credential(user=user, proof=self.reviews.proof(token, user))

    async def aclose(self) -> None:
        """Stop checking the tokens of running streams."""
        await self.reviews.aclose()
