"""A saved plan: what ``reconcile plan --out FILE`` writes and ``reconcile apply FILE``
applies, exactly as reviewed (docs/saved-plans.md).

The file is JSON: a format marker and version, the request's flags (spec paths relative
to the repository, environment, owner, prune, migrate, ...), the digests of every file
the plan was made from and their commit (:mod:`reconciler.specs.fingerprint`), the
server's identity (the account's lineage included:
:mod:`reconciler.model.server_identity`), the plan as the plan JSON shows it, and every
step's observed live config (the redacted config and its digest; a KeyValue entry's
revision, never its value). It holds no connection setting and no secret. A digest
over its canonical form rejects an edited or corrupted file.

The file is data, never code: apply plans again from the specs and the live state, with
the saved flags, and executes that fresh plan only when it is the saved one: the same
steps (:func:`reconciler.planning.review.differences`, the rule the prompt uses after
"yes") on the same observed live configs. Both plans go through the same projection
(:func:`observed`) first, so they are compared on what the file can hold. A file edited
to add a step, or to change a config, and its digest fixed up, still meets a fresh plan
without that step: refused.

Pure: no network, no disk (the CLI reads and writes the file).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from reconciler.errors import SavedPlanRefused
from reconciler.identity import ENTRY, KINDS, ResourceRef
from reconciler.model.diff import FieldChange
from reconciler.model.loss import Loss
from reconciler.model.migration import CHOICES as MIGRATION_CHOICES
from reconciler.model.server_identity import ServerIdentity
from reconciler.model.state import ServerInfo
from reconciler.model.values import redact
from reconciler.planning.review import differences
from reconciler.planning.steps import Create, Delete, Migrate, Plan, Replace, Step, Update
from reconciler.specs.fingerprint import FileDigest, SpecDigest
from reconciler.specs.spec import OWNER_PATTERN

__all__ = ["FORMAT", "SavedPlan", "SavedRequest", "is_saved_plan", "observed"]

#: The marker that says a JSON file is a saved plan (``apply`` looks for it), and the
#: version of its layout this release writes and reads (2: the server's identity holds
#: the account's lineage; a version 1 file has none, so it could not tell two servers
#: of one name apart, and is refused: plan again).
FORMAT = "jetstream-gitops saved plan"
FORMAT_VERSION = 2


@dataclass(frozen=True)
class SavedRequest:
    """The plan request's flags as a saved plan keeps them (paths relative to the root)."""

    paths: tuple[str, ...]
    overlays: tuple[str, ...] = ()
    env: str | None = None
    owner: str = "default"
    take_over: bool = False
    prune: bool = False
    strict: bool = False
    migrate: bool = False
    migration: str | None = None
    policies: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "paths": list(self.paths),
            "overlays": list(self.overlays),
            "env": self.env,
            "owner": self.owner,
            "take_over": self.take_over,
            "prune": self.prune,
            "strict": self.strict,
            "migrate": self.migrate,
            "migration": self.migration,
            "policies": list(self.policies),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SavedRequest:
        """The flags of a file; ValueError for an owner ``--owner`` or a way out of a
        migration ``--migration`` would refuse."""
        migration, env = raw.get("migration"), raw.get("env")
        owner = str(raw.get("owner") or "default")
        if not re.fullmatch(OWNER_PATTERN, owner):
            raise ValueError("owner")
        if migration is not None and migration not in MIGRATION_CHOICES:
            raise ValueError("migration")
        return cls(
            paths=tuple(_texts(raw["paths"])),
            overlays=tuple(_texts(raw.get("overlays") or [])),
            env=str(env) if env is not None else None,
            owner=owner,
            take_over=raw.get("take_over") is True,
            prune=raw.get("prune") is True,
            strict=raw.get("strict") is True,
            migrate=raw.get("migrate") is True,
            migration=str(migration) if migration is not None else None,
            policies=tuple(_texts(raw.get("policies") or [])),
        )


@dataclass(frozen=True)
class SavedPlan:
    """What ``plan --out`` saved: read back with :meth:`parse`, checked by apply."""

    request: SavedRequest
    specs: SpecDigest
    server: ServerIdentity
    plan: Mapping[str, Any]  # the plan JSON (schemas/plan.schema.json) as reviewed
    live: tuple[Mapping[str, Any], ...] = field(default=())  # one per step, in order
    #: Where the file's paths resolve, and the project file the apply run reads: set by
    #: the front door that read the file (:meth:`at`), never read from it.
    root: Path = field(default=Path("."), compare=False)
    project: Path | None = field(default=None, compare=False)

    def at(self, root: Path, project: Path | None = None) -> SavedPlan:
        """This plan, its paths resolved in ``root`` (``project``: the apply's project file)."""
        return replace(self, root=root, project=project)

    @classmethod
    def of(
        cls, the_plan: Plan, request: SavedRequest, specs: SpecDigest, server: ServerIdentity
    ) -> SavedPlan:
        document = the_plan.to_json()
        return cls(request, specs, server, document, tuple(_live_json(the_plan)))

    # -- the file -----------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "request": self.request.to_json(),
            "specs": {
                "digest": self.specs.digest,
                "commit": self.specs.commit,
                "salt": self.specs.salt,
                "files": [
                    {"path": f.path, "role": f.role, "digest": f.digest} for f in self.specs.files
                ],
            },
            "server": self.server.to_json(),
            "plan": dict(self.plan),
            "live": [dict(entry) for entry in self.live],
        }
        return {**body, "digest": integrity(body)}

    def text(self) -> str:
        """The file's text: indented JSON, the marker first."""
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def parse(cls, text: str, *, source: str) -> SavedPlan:
        """The saved plan in ``text`` (the file ``source``); refused when it is not one,
        was written by another format version, or was edited."""
        try:
            document = json.loads(text, object_pairs_hook=_unique)
        except _Duplicate as err:
            raise SavedPlanRefused(f"{source}: not a saved plan ({err})") from None
        except (ValueError, RecursionError):  # nested deeper than the interpreter's stack
            raise SavedPlanRefused(f"{source}: not a saved plan (not JSON)") from None
        if not is_saved_plan(document):
            raise SavedPlanRefused(f"{source}: not a saved plan (no {FORMAT!r} marker)")
        if document.get("format_version") != FORMAT_VERSION:
            found = document.get("format_version")
            raise SavedPlanRefused(
                f"{source}: a saved plan of format version {found!r}; this release reads "
                f"version {FORMAT_VERSION}: plan again"
            )
        body = {k: v for k, v in document.items() if k != "digest"}
        if document.get("digest") != integrity(body):
            raise SavedPlanRefused(
                f"{source}: the saved plan was edited or corrupted (its digest does not "
                "match its content): nothing was changed"
            )
        try:
            return cls._from_json(document)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise SavedPlanRefused(f"{source}: a saved plan this release cannot read") from None

    @classmethod
    def _from_json(cls, document: Mapping[str, Any]) -> SavedPlan:
        specs = document["specs"]
        files = tuple(_file(f) for f in specs["files"])
        commit, salt = specs.get("commit"), str(specs["salt"])
        bytes.fromhex(salt)  # the key of the file digests (ValueError: not one)
        digest = SpecDigest(salt, files, str(commit) if commit else None)
        if digest.digest != specs.get("digest"):
            raise ValueError("spec digest")
        plan, live = document["plan"], document["live"]
        if not isinstance(plan, dict) or not isinstance(live, list):
            raise TypeError("plan")
        saved = cls(
            SavedRequest.from_json(document["request"]),
            digest,
            ServerIdentity.from_json(document["server"]),
            plan,
            tuple(live),
        )
        saved.steps()  # every step readable now, not halfway through a check
        return saved

    # -- the checks ---------------------------------------------------------------------
    def steps(self) -> Plan:
        """The saved steps as a plan :func:`differences` compares (no configs: a saved
        plan's steps are never executed)."""
        return _as_plan(self.plan, self.live)

    def differences(self, now: Plan) -> list[str]:
        """What differs between the saved plan and ``now``, the plan made again at apply:
        one sentence per resource, none when ``now`` is the saved plan."""
        return differences(self.steps(), observed(now), observed_live=True)

    @property
    def summary(self) -> Mapping[str, int]:
        found = self.plan.get("summary")
        return found if isinstance(found, Mapping) else {}


def is_saved_plan(document: Any) -> bool:
    """Whether a decoded JSON value is a saved plan (by its marker, not its file name)."""
    return isinstance(document, dict) and document.get("format") == FORMAT


def integrity(body: Mapping[str, Any]) -> str:
    """The digest over a saved plan's canonical form (sorted keys, no spaces)."""
    return _sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True))


def _sha256(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def observed(the_plan: Plan) -> Plan:
    """``the_plan`` as a saved plan holds it (read back as :meth:`SavedPlan.steps` reads
    it): what the plan made at apply is compared in."""
    return _as_plan(the_plan.to_json(), _live_json(the_plan))


def _as_plan(document: Mapping[str, Any], live: Sequence[Mapping[str, Any]]) -> Plan:
    """The steps of a plan JSON ``document`` with their observed ``live`` configs."""
    changes = document["changes"]
    if len(changes) != len(live):
        raise ValueError("one live config per step")
    server = ServerInfo.from_json(document.get("server") or {})
    steps = tuple(_step(change, entry) for change, entry in zip(changes, live, strict=True))
    return Plan(server=server, changes=steps, owner=str(document.get("owner", "default")))


# --- steps and live configs -------------------------------------------------------------


def _live_json(the_plan: Plan) -> list[dict[str, Any]]:
    """Each step's observed live config, as the file holds it."""
    return [_observed_live(step) for step in the_plan.changes]


def _observed_live(step: Step) -> dict[str, Any]:
    live = getattr(step, "live", None)
    config = _saved_config(step.ref, live)
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return {
        "kind": step.kind,
        "name": step.name,
        "stream": step.stream,
        "digest": None if config is None else _sha256(canonical),
        "config": config,
    }


def _saved_config(ref: ResourceRef, live: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A live config as the file keeps it: secret-looking fields redacted (as the plan
    JSON does); a KeyValue entry's revision only (its value may be a secret; any write
    makes a new revision)."""
    if live is None:
        return None
    if ref.kind == ENTRY:
        return {"revision": live.get("revision")}
    redacted: dict[str, Any] = redact(dict(live))
    return redacted


def _step(change: Mapping[str, Any], live: Mapping[str, Any]) -> Step:
    """One step from the plan JSON's change and the file's live config."""
    kind, stream = change["kind"], change.get("stream")
    if kind not in KINDS or not (stream is None or isinstance(stream, str)):
        raise ValueError(f"not a resource: {kind!r}")
    ref = ResourceRef(kind, str(change["name"]), stream)
    if (live.get("kind"), live.get("name"), live.get("stream")) != (ref.kind, ref.name, ref.stream):
        raise ValueError("live configs out of step order")
    fields = tuple(
        FieldChange(str(f["path"]), f.get("before"), f.get("after")) for f in change["fields"]
    )
    losses = tuple(
        Loss(str(loss.get("field") or ""), str(loss.get("summary") or ""), loss.get("messages"))
        for loss in change.get("loss") or []
    )
    config = live.get("config")
    seen: dict[str, Any] = dict(config) if isinstance(config, Mapping) else {}
    common: dict[str, Any] = {"ref": ref, "fields": fields, "losses": losses}
    match change["action"]:
        case "create":
            return Create(config={}, live=seen if config is not None else None, **common)
        case "update":
            return Update(config={}, live=seen, **common)
        case "replace":
            return Replace(config={}, live=seen, **common)
        case "migrate":
            phase = (change.get("migration") or {}).get("phase")
            return Migrate(config={}, live=seen, phase=phase, **common)
        case "delete":
            return Delete(live=seen, **common)
    raise ValueError(f"unknown action {change['action']!r}")


class _Duplicate(ValueError):
    """A JSON object naming a key twice."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are unique: a key given twice would show a reader of the
    file one value and apply another."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _Duplicate(f"duplicate key {key!r}")
        found[key] = value
    return found


def _file(raw: Mapping[str, Any]) -> FileDigest:
    digest = raw["digest"]
    return FileDigest(str(raw["path"]), str(raw["role"]), None if digest is None else str(digest))


def _texts(values: Any) -> list[str]:
    if not isinstance(values, list):
        raise TypeError("a list")
    return [str(v) for v in values]
