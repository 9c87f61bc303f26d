"""Persisted documents: trusted documents (``--trusted-documents``) and Automatic
Persisted Queries.

Every transport turns a request's parameters into a prepared operation through
:meth:`Persisted.prepare`, which first finds the document's text:

* ``query``: the text itself;
* ``documentId`` (GraphQL over HTTP's persisted documents: ``sha256:<hex>``, or a bare
  id), Relay's ``doc_id`` or ``id``, or Apollo's ``extensions.persistedQuery.sha256Hash``:
  the text stored under that id.

With a manifest of trusted documents (the ``persisted-documents.json`` graphql-codegen's
client preset writes, Relay's ``persisted_queries.json``, or Apollo's persisted query
manifest) the gateway serves those documents only: an id it does not know is
``PERSISTED_QUERY_NOT_FOUND`` (404), free text that is not one of them is
``PERSISTED_QUERY_NOT_ALLOWED`` (403).  Both are refused with a dictionary look-up,
before the text is parsed: an attacker's documents cost the gateway no parse.

Without one, Automatic Persisted Queries (Apollo's protocol, on unless
``--no-persisted-queries``): a hash alone that is not known answers
``PersistedQueryNotFound``, the client sends the text with its hash, the gateway checks
that the hash is the text's SHA-256 and, once the document has parsed and validated,
keeps it in a cache bounded in count and in bytes, so later requests (GET ones too,
which a CDN can cache) send the hash alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import signal
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import watchfiles

from gateway.core import ConfigError
from gateway.graphql.engine.execution import Engine, Prepared, RequestError
from gateway.graphql.errors import ApiError, format_exception

log = logging.getLogger(__name__)

#: The request parameters that name a persisted document, first found first used.
DOCUMENT_IDS = ("documentId", "doc_id", "id")

_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_PREFIX = "sha256:"

#: Documents Automatic Persisted Queries keep, and the characters of text they may hold.
APQ_ENTRIES = 1_000
APQ_CHARS = 4 * 1024 * 1024

#: Apollo's persisted-queries link retries with the full text on this message or code.
NOT_FOUND = "PERSISTED_QUERY_NOT_FOUND"
NOT_ALLOWED = "PERSISTED_QUERY_NOT_ALLOWED"
NOT_SUPPORTED = "PERSISTED_QUERY_NOT_SUPPORTED"
HASH_MISMATCH = "PERSISTED_QUERY_HASH_MISMATCH"


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _refusal(
    message: str, code: str, status: int, headers: Mapping[str, str] | None = None
) -> RequestError:
    error = ApiError(message, code=code, http_status=status)
    return RequestError([format_exception(error)], status, headers)


#: A miss must not be cached by a CDN: the client registers the text next, and the same
#: URL then answers.
_NO_STORE = {"Cache-Control": "no-store"}


# -- the manifest ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Manifest:
    """Trusted documents by id (as the manifest names them, and by their SHA-256) and by
    text (free text that is one of them is served too)."""

    by_id: dict[str, str]
    texts: frozenset[str]
    #: The longest document's length: longer text is refused without being hashed.
    longest: int

    def __len__(self) -> int:
        return len(self.texts)


def parse_manifest(raw: bytes, where: str) -> Manifest:
    """A manifest's documents: a JSON object of id to document text (graphql-codegen's
    client preset, Relay), or Apollo's persisted query manifest (``operations`` with
    ``id`` and ``body``).

    A key that is a SHA-256 (64 hex digits, ``sha256:`` before it or not) must be the
    SHA-256 of its text: otherwise a client sending the hash of the document it means
    would run another one.  Other keys (Relay's MD5 ids, a remote persister's ids) are
    taken as names.

    Raises:
        ConfigError: the file is not such a manifest, names no document, or a hash key is
            not its text's.
    """
    try:
        decoded = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON ({exc})") from None
    if isinstance(decoded, dict) and isinstance(decoded.get("operations"), list):
        pairs = [
            (op.get("id"), op.get("body")) if isinstance(op, dict) else (None, None)
            for op in decoded["operations"]
        ]
    elif isinstance(decoded, dict):
        pairs = list(decoded.items())
    else:
        raise ConfigError(
            f"{where}: expected a JSON object of document id to document text "
            '({"<sha256>": "query ..."}, as graphql-codegen and Relay write)'
        )
    by_id: dict[str, str] = {}
    for key, text in pairs:
        if not isinstance(key, str) or not key or not isinstance(text, str) or not text.strip():
            raise ConfigError(f"{where}: the entry {key!r} is not an id with a document's text")
        name = key.removeprefix(_PREFIX)
        if _SHA256.fullmatch(name):
            name = name.lower()
            actual = sha256_hex(text)
            if actual != name:
                raise ConfigError(
                    f"{where}: the key {key} is not the SHA-256 of its document (that is "
                    f"{actual}); regenerate the manifest"
                )
        by_id[name] = text
        by_id.setdefault(sha256_hex(text), text)
    if not by_id:
        raise ConfigError(f"{where}: names no document")
    texts = frozenset(by_id.values())
    return Manifest(by_id, texts, max(map(len, texts)))


def read_manifest(path: Path) -> tuple[bytes, Manifest]:
    """The manifest in ``path``: its bytes and its documents.

    Raises:
        ConfigError: it cannot be read, or is not a valid manifest.
    """
    where = f"--trusted-documents {path}"
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{where}: {exc.strerror or exc}") from None
    return raw, parse_manifest(raw, where)


# -- Automatic Persisted Queries ------------------------------------------------------------


class Registered:
    """Documents registered by Automatic Persisted Queries, by SHA-256: least recently used
    first out, past ``entries`` documents or ``max_chars`` characters of text, so a caller
    sending many distinct documents moves others out but never grows it."""

    def __init__(self, entries: int = APQ_ENTRIES, max_chars: int = APQ_CHARS) -> None:
        self.entries = entries
        self.max_chars = max_chars
        self.chars = 0
        self._texts: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._texts)

    def get(self, digest: str) -> str | None:
        text = self._texts.get(digest)
        if text is not None:
            self._texts.move_to_end(digest)
        return text

    def put(self, digest: str, text: str) -> None:
        if digest in self._texts:
            self._texts.move_to_end(digest)
            return
        self._texts[digest] = text
        self.chars += len(text)
        while len(self._texts) > self.entries or self.chars > self.max_chars:
            _, evicted = self._texts.popitem(last=False)
            self.chars -= len(evicted)


# -- the policy -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Asked:
    """What a request names: a document id (a SHA-256 as lower-case hex, without its
    ``sha256:``), the SHA-256 its text must have (when it names one), and its text."""

    id: str | None
    hash: str | None
    query: str | None


def _asked(params: Mapping[str, Any]) -> _Asked:
    sent = params.get("query")
    # Relay sends an empty text with its id; anything else not a text is the engine's to
    # refuse.
    query = sent if isinstance(sent, str) and sent.strip() else None
    extensions = params.get("extensions")
    persisted = extensions.get("persistedQuery") if isinstance(extensions, dict) else None
    digest: str | None = None
    if persisted is not None:
        if not isinstance(persisted, dict) or persisted.get("version", 1) != 1:
            raise _refusal(
                "`extensions.persistedQuery` must be version 1, with a sha256Hash",
                "BAD_REQUEST",
                400,
            )
        value = persisted.get("sha256Hash")
        if not isinstance(value, str) or not _SHA256.fullmatch(value):
            raise _refusal(
                "`extensions.persistedQuery.sha256Hash` must be 64 hex digits", "BAD_REQUEST", 400
            )
        digest = value.lower()
    named = next((params[k] for k in DOCUMENT_IDS if params.get(k) is not None), None)
    if named is not None and not isinstance(named, str | int):
        raise _refusal("a document id must be a string or a number", "BAD_REQUEST", 400)
    ident = str(named) if named is not None else digest
    if ident is not None:
        bare = ident.removeprefix(_PREFIX)
        if _SHA256.fullmatch(bare):
            ident = bare.lower()
            digest = digest or ident
    return _Asked(ident, digest, query)


class Persisted:
    """Finds the text of each request's document: the trusted documents only, when a
    manifest is given, else any text, and Automatic Persisted Queries when on.

    Args:
        manifest: the trusted documents file (``--trusted-documents``), read at once.
        apq: serve Automatic Persisted Queries (ignored with a manifest, whose documents
            are the only ones, by hash as by text).
        registered: the APQ cache (a default one when not given).

    Raises:
        ConfigError: ``manifest`` cannot be read or is not a valid manifest.
    """

    def __init__(
        self,
        manifest: Path | None = None,
        *,
        apq: bool = True,
        registered: Registered | None = None,
    ) -> None:
        self.path = manifest
        self._raw = b""
        self.trusted: Manifest | None = None
        if manifest is not None:
            self._raw, self.trusted = read_manifest(manifest)
        self.apq = apq
        self.registered = registered or Registered()
        #: Bumped by each reload of the manifest that took; :meth:`reloaded` waits for it.
        self.generation = 0
        self._changed = asyncio.Event()
        if self.trusted is not None:
            log.info("serving %d trusted documents from %s only", len(self.trusted), manifest)

    # -- serving ---------------------------------------------------------------------------

    def prepare(self, engine: Engine, params: Mapping[str, Any]) -> Prepared:
        """The request's operation, parsed (or from ``engine``'s cache) and validated.

        Raises:
            RequestError: the document is unknown or not allowed (refused before any
                parse), its hash is not its text's, or it does not parse or validate.
        """
        asked = _asked(params)
        trusted = self.trusted
        if trusted is not None:
            text = self._trusted(trusted, asked)
            return engine.prepare(text, params.get("operationName"))
        if asked.id is None:
            return engine.prepare(params.get("query"), params.get("operationName"))
        if not self.apq:
            if asked.query is not None:
                return engine.prepare(asked.query, params.get("operationName"))
            # Apollo's link stops sending hashes on this message or code.
            raise _refusal("PersistedQueryNotSupported", NOT_SUPPORTED, 400)
        if asked.query is None:
            known = self.registered.get(asked.id)
            if known is None:
                # Exactly what Apollo's persisted-queries link retries on.
                raise _refusal("PersistedQueryNotFound", NOT_FOUND, 404, _NO_STORE)
            return engine.prepare(known, params.get("operationName"))
        if asked.hash is None or len(asked.query) > engine.limits.max_document_bytes:
            # An id that is no hash registers nothing; too long a text is refused by the
            # engine before it is hashed.
            return engine.prepare(asked.query, params.get("operationName"))
        actual = sha256_hex(asked.query)
        if actual != asked.hash:
            raise _refusal(
                f"the document's SHA-256 is {actual}, not the hash sent ({asked.hash}): "
                "hash the exact text sent",
                HASH_MISMATCH,
                400,
            )
        prepared = engine.prepare(asked.query, params.get("operationName"))
        self.registered.put(actual, asked.query)  # valid documents only
        return prepared

    @staticmethod
    def _trusted(trusted: Manifest, asked: _Asked) -> str:
        query = asked.query
        if asked.id is not None:
            text = trusted.by_id.get(asked.id)
            if text is not None:
                if query is not None and query != text:
                    raise _refusal(
                        f"the text sent is not the trusted document {asked.id!r}",
                        HASH_MISMATCH,
                        400,
                    )
                return text
            if query is None:
                raise _refusal(
                    f"no trusted document has the id {asked.id!r} (--trusted-documents): "
                    "is the gateway's manifest the one the client was built with?",
                    NOT_FOUND,
                    404,
                    _NO_STORE,
                )
        if query is None:
            raise _refusal(
                "this gateway serves trusted documents only: send the document's id as "
                "`documentId` (or extensions.persistedQuery.sha256Hash)",
                "BAD_REQUEST",
                400,
            )
        # Longer than every trusted document: refused without hashing the text.
        if len(query) > trusted.longest or query not in trusted.texts:
            raise _refusal(
                "this gateway serves trusted documents only (--trusted-documents) and this "
                "text is not one of them: send a trusted document's id as `documentId`",
                NOT_ALLOWED,
                403,
            )
        return query

    # -- following the manifest ------------------------------------------------------------

    def reload(self) -> bool:
        """Read the manifest again when its bytes changed; a file that is not (yet) a valid
        manifest is logged and the documents served so far stay.  Returns whether a new
        manifest took."""
        if self.path is None:
            return False
        try:
            raw, manifest = read_manifest(self.path)
        except ConfigError as exc:
            log.error("trusted documents not reloaded, the previous ones still serve: %s", exc)
            return False
        if raw == self._raw:
            return False
        self.trusted, self._raw = manifest, raw
        log.info("trusted documents reloaded: %d from %s", len(manifest), self.path)
        self.generation += 1
        self._changed.set()
        self._changed = asyncio.Event()
        return True

    async def reloaded(self, after: int) -> None:
        """Wait until a manifest newer than generation ``after`` took."""
        while self.generation <= after:
            await self._changed.wait()

    async def follow(self, *, rescan_seconds: float = 5.0) -> None:
        """Reload the manifest when its file changes, or on SIGHUP, until cancelled.

        The directory is watched, not the file: a mounted ConfigMap changes by swapping
        its ``..data`` link, and an editor saves by replacing the file; it is also read
        every ``rescan_seconds`` (a change made before the watch began is not missed).
        Nothing to follow without a manifest.
        """
        if self.path is None:
            return
        loop = asyncio.get_running_loop()
        hup = False
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
            loop.add_signal_handler(signal.SIGHUP, self.reload)  # the main thread's loop only
            hup = True
        try:
            async for _ in watchfiles.awatch(
                self.path.parent,
                watch_filter=None,
                debounce=200,
                rust_timeout=int(rescan_seconds * 1000),
                yield_on_timeout=True,
            ):
                self.reload()
        finally:
            if hup:
                loop.remove_signal_handler(signal.SIGHUP)
