"""What earlier plans found unchanged, so that a re-plan need not compare it again (pure).

A declared resource's plan entry is decided by: its spec, its live config as the server
sent it, for a consumer the config of its stream (the declared one, or the live one when
the stream is not managed here), the server's facts, the owner, and the planning code.
When the plan found a resource ``Unchanged``, the digest of all of that is remembered;
the next resource that meets the same digest, in this plan or a later one, knows the
answer without normalising or diffing. Any difference in any input is a different
digest, so a remembered answer is only ever used for the inputs it was computed from; a
miss is planned as usual.

But for names: where the live config holds in its name fields what the spec's name
gives them (:func:`~reconciler.model.normalize.named_as_declared`), the digest leaves
the name fields out of both sides, so consumers and streams declared alike share one
answer (4,000 consumers of 2,000 streams, all ``ack_policy: explicit``, are planned
as one). Otherwise the names are in the digest. Likewise each of the fields taken
verbatim (:data:`~reconciler.model.normalize.VERBATIM_FIELDS`: a consumer's filter, a
description) that the live config holds as declared is left out of both sides, and the
digest says which; one held otherwise is in it, the declared value and the live one.

Only ``Unchanged`` is remembered: every other entry carries configs, reasons and losses
that are computed each time. The digests are kept by :mod:`reconciler.execution.memo_store`.

A kept digest is a claim that some inputs plan as ``Unchanged``: one written by someone
else (a forged cache folder) could make a changed resource look unchanged, so a memo
kept between plans is keyed (``secret``: BLAKE2b's keyed mode, the spec cache's key):
without the key nobody can compute the digest of any input. A memo for one plan alone
needs no key.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from reconciler.model.normalize import (
    NAME_FIELDS,
    STREAM_NAME_FIELDS,
    VERBATIM_FIELDS,
    named_as_declared,
)
from reconciler.model.state import ServerInfo
from reconciler.specs.cache import code_digest
from reconciler.specs.spec import Spec

DIGEST_SIZE = 16
#: Inputs of :meth:`Memo.key` whose digest a memo keeps at most (resources declared and
#: live alike hash once; a few MiB where every resource differs).
HASHED = 4096
#: the code that decides a plan: validating, normalising, diffing, planning
PLANNING_CODE = ("specs", "model", "planning")


def _digest(value: Any) -> bytes:
    return _hash(_data(value))


def _data(value: Any) -> bytes:
    """What :func:`_digest` hashes: ``value``'s JSON, keys sorted."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def _hash(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=DIGEST_SIZE).digest()


def _mac_key(secret: bytes) -> bytes:
    """``secret`` as a BLAKE2b key (at most 64 bytes)."""
    return secret if len(secret) <= 64 else hashlib.blake2b(secret).digest()


def spec_digest(spec: Spec) -> bytes:
    """A spec's identity and wire config (not where it was written)."""
    return _digest([spec.kind, spec.name, spec.stream, spec.external, spec.config])


def _shape_data(spec: Spec, names: tuple[str, ...]) -> bytes:
    """What a spec's shape digest hashes: its wire config but for ``names`` (its name
    fields and the fields taken verbatim), nor its name, nor its stream (which stream a
    consumer is in decides only where it is planned)."""
    return _data([spec.kind, spec.external, _without(spec.config, names)])


def _without(config: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """``config`` less the fields ``names``, in its order: a copy made in C and a few
    deletions (a comprehension over every field was a third of a cold memo's time)."""
    rest = dict(config)
    for name in names:
        rest.pop(name, None)
    return rest


def live_digest(raw: Mapping[str, Any]) -> bytes:
    """A live config exactly as the server sent it."""
    return _digest(raw)


#: What a shape digest leaves out, by kind: the name fields and those taken verbatim.
_LEFT_OUT = {kind: names + VERBATIM_FIELDS[kind] for kind, names in NAME_FIELDS.items()}
#: What :meth:`Memo.key` leaves out of a live config and marks, by kind, when it holds
#: every field taken verbatim as declared: what its loop over them gives then.
_ALL_AS_DECLARED = {
    kind: (names + VERBATIM_FIELDS[kind], orjson.dumps([[] for _ in VERBATIM_FIELDS[kind]]))
    for kind, names in NAME_FIELDS.items()
}


class Memo:
    """The digests of resources found unchanged before (``known``), and of those this plan
    finds unchanged (``found``: what to remember for the next one)."""

    def __init__(self, salt: bytes, known: Iterable[bytes] = (), *, secret: bytes = b"") -> None:
        self.salt = salt
        self.known = frozenset(known)
        self.found: set[bytes] = set()
        self.hits = 0
        # spec digests by the spec's id, the spec held so that no id is ever another's
        # (not by name: the fleet plans several environments' same-named specs with
        # one); equal digests are one object (specs declared alike share a shape)
        self._held: list[Spec] = []
        self._specs: dict[int, bytes] = {}
        self._shapes: dict[int, bytes] = {}
        self._equal: dict[bytes, bytes] = {}
        self._digests: dict[bytes, bytes] = {}  # what _hashed hashed, by its input
        self._shaped: dict[bytes, bytes] = {}  # shape digests, by what they hash
        self._salted = hashlib.blake2b(salt, digest_size=DIGEST_SIZE, key=_mac_key(secret))
        #: names the file the memo is kept in: the salt under the key (memo_store)
        self.tag = hashlib.blake2b(
            b"file\0" + salt, digest_size=DIGEST_SIZE, key=_mac_key(secret)
        ).digest()

    def prepare(self, specs: Iterable[Spec]) -> None:
        """Digest ``specs`` now (work that needs no live state: a client does it while
        the live state is read)."""
        for spec in specs:
            if spec.kind in NAME_FIELDS:
                self._shape(spec)
            else:
                self._spec(spec)

    def _spec(self, spec: Spec) -> bytes:
        known = self._specs.get(id(spec))
        if known is None:
            known = self._specs[id(spec)] = self._kept(spec, spec_digest(spec))
        return known

    def _shape(self, spec: Spec) -> bytes:
        known = self._shapes.get(id(spec))
        if known is None:
            # hashed once per shape: specs declared alike give the same data
            data = _shape_data(spec, _LEFT_OUT[spec.kind])
            digest = self._shaped.get(data)
            if digest is None:
                if len(self._shaped) >= HASHED:
                    self._shaped.clear()
                digest = self._shaped[data] = _hash(data)
            known = self._shapes[id(spec)] = self._kept(spec, digest)
        return known

    def _kept(self, spec: Spec, digest: bytes) -> bytes:
        self._held.append(spec)
        return self._equal.setdefault(digest, digest)

    @classmethod
    def for_plan(
        cls, server: ServerInfo, owner: str, known: Iterable[bytes] = (), *, secret: bytes = b""
    ) -> Memo:
        """A memo for plans of ``owner`` against a server with these facts (where the
        client connected is not one of them), its digests keyed by ``secret``."""
        facts = dataclasses.replace(server, address=None)
        salt = _digest([code_digest(PLANNING_CODE), repr(facts), owner])
        return cls(salt, known, secret=secret)

    def key(self, spec: Spec, raw: Mapping[str, Any], basis: bytes = b"") -> bytes:
        """The digest of one declared resource's inputs; ``basis``: for a consumer, the
        :meth:`basis` of its stream.

        One hash over the salt, ``s`` and the spec's shape or ``e`` and its digest, the
        basis (empty, ``N``, or S or L and a digest) and the live config's JSON (starting
        with ``{``; without the name fields after ``s``), in that order, so no two inputs
        run together. The JSON keeps the server's key order: the same config sent in
        another order is a miss, planned as usual (sorting took half the time).

        After ``s``: for each field taken verbatim, in order, ``[]`` when the live config
        holds it as declared (left out of the live JSON too), else ``[declared value]``
        (the live value stays in the live JSON), as one JSON list."""
        kind = spec.kind
        names = named_as_declared(kind, spec.name, spec.config, raw)
        if names is not None:
            config = spec.config
            verbatim = VERBATIM_FIELDS[kind]
            for field in verbatim:
                if raw.get(field) != config.get(field):
                    found: list[list[Any]] = []
                    for each in verbatim:
                        declared = config.get(each)
                        if raw.get(each) == declared:
                            names += (each,)
                            found.append([])
                        else:
                            found.append([declared])
                    marks = orjson.dumps(found)
                    break
            else:
                names, marks = _ALL_AS_DECLARED[kind]  # the usual case, made once
            head = b"s" + self._shape(spec) + marks
            raw = _without(raw, names)
        else:
            head = b"e" + self._spec(spec)
        return self._hashed(head + basis + orjson.dumps(raw, option=orjson.OPT_NON_STR_KEYS))

    def _hashed(self, data: bytes) -> bytes:
        """The salted digest of ``data`` (what :meth:`key` says, in one piece: BLAKE2b
        over parts fed one by one is the same digest). Resources declared and live alike
        give the same ``data``: each is hashed once (the last ``HASHED`` kept)."""
        known = self._digests.get(data)
        if known is None:
            if len(self._digests) >= HASHED:
                self._digests.clear()
            digest = self._salted.copy()
            digest.update(data)
            known = self._digests[data] = digest.digest()
        return known

    def basis(self, declared: Spec | None, live: Mapping[str, Any] | None) -> bytes:
        """What a stream's consumers are planned against: the declared stream (managed
        here), else the live one; either but for its name fields (a consumer's config
        takes only the stream's consumer limits from it)."""
        if declared is not None and not declared.external:
            if declared.kind in NAME_FIELDS:
                return b"S" + self._shape(declared)
            return b"E" + self._spec(declared)
        if live is None:
            return b"N"
        return b"L" + live_digest({k: v for k, v in live.items() if k not in STREAM_NAME_FIELDS})

    def unchanged(self, key: bytes) -> bool:
        """Whether a resource with these inputs was found unchanged before."""
        if key in self.known or key in self.found:
            self.found.add(key)
            self.hits += 1
            return True
        return False

    def remember(self, key: bytes) -> None:
        self.found.add(key)
