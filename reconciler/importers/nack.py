"""NACK's custom resources (``jetstream.nats.io``: Stream, Consumer, KeyValue, ObjectStore)
as spec documents.

NACK's controller turns a resource into JetStream config in three layers. This mapping
applies the same three, in the same order:
1. The CRD's defaults for the resource's API version. Kubernetes fills them in; a
   manifest in git does not have them, so they are applied here. NACK's `storage` default
   is `memory`, and a consumer's `ackPolicy` defaults to `none` with `ackWait` `1ns`.
2. For streams and consumers, the template of jsm.go, the library NACK creates them
   with. A stream's `maxAge` is one year unless given; a consumer starts as deliver
   `all`, ack `explicit`, `30s`, replay `instant`.
3. The fields set. camelCase names become the API's snake_case, Go durations
   (`1h30m`, `500ms`) become nanoseconds, and `deliverPolicy` `byStartSequence` becomes
   `by_start_sequence`.

Both API versions NACK has shipped are read: ``v1beta1`` and ``v1beta2``.

The connection fields (`account`, `servers`, `creds`, `nkey`, `tls`, `jsDomain`,
`preventDelete`, `preventUpdate`) say where a resource goes, not what it is: they are not
part of a spec. An `Account` resource, which holds a connection and its secrets, becomes
an environment of the project file (docs/environments.md), and the resources naming it
(`spec.account`) become that environment's own specs, validated apart: they are never
written among the specs every environment shares, where one Account's streams would be
applied into the other's (two Accounts may both have a stream `ORDERS`). A resource
naming an Account the manifests do not hold is an error at its line. Any other field the
mapping does not know is a warning with its line.

An ``ackWait`` below 1ms on a consumer that acknowledges (NACK's CRD default is ``1ns``,
and its controller sends it) is a warning at its line: the server keeps it as written
(measured on 2.10 to 2.15: nothing rounds it up), so an unacknowledged message is
delivered again at once, over and over.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reconciler.errors import Problem, SpecError, brief
from reconciler.importers import ImportResult
from reconciler.importers.imported import Shape, misshapen, renamed, validated
from reconciler.locations import Location
from reconciler.specs.document import Document
from reconciler.specs.fields import INT64_MAX
from reconciler.specs.loader import read_yaml_trees
from reconciler.specs.server_url import split_scheme, userinfo

GROUP = "jetstream.nats.io/"
VERSIONS = ("v1beta1", "v1beta2")
KINDS = {
    "Stream": "Stream",
    "Consumer": "Consumer",
    "KeyValue": "KeyValue",
    "ObjectStore": "ObjectStore",
}
YEAR = 365 * 24 * 3600 * 1_000_000_000

#: CRD defaults per kind (deploy/crds.yml; the same in v1beta1 for the fields it has).
CRD_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "Stream": {
        "retention": "limits",
        "maxConsumers": -1,
        "maxMsgs": -1,
        "maxBytes": -1,
        "discard": "old",
        "maxAge": "",
        "maxMsgsPerSubject": 0,
        "maxMsgSize": -1,
        "storage": "memory",
        "replicas": 1,
    },
    "Consumer": {
        "deliverPolicy": "all",
        "ackPolicy": "none",
        "ackWait": "1ns",
        "replayPolicy": "instant",
    },
    "KeyValue": {"replicas": 1},
    "ObjectStore": {"replicas": 1},
}
#: jsm.go's templates (``DefaultStream``, ``DefaultConsumer``), in wire form.
JSM_STREAM = {
    "retention": "limits",
    "discard": "old",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_msgs_per_subject": -1,
    "max_bytes": -1,
    "max_age": YEAR,
    "max_msg_size": -1,
    "num_replicas": 1,
}
JSM_CONSUMER = {
    "deliver_policy": "all",
    "ack_policy": "explicit",
    "ack_wait": 30_000_000_000,
    "replay_policy": "instant",
}
CONNECTION_FIELDS = frozenset(
    {
        "account",
        "servers",
        "creds",
        "nkey",
        "tls",
        "tlsFirst",
        "jsDomain",
        "preventDelete",
        "preventUpdate",
    }
)

_GO_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_GO_TERM = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def go_duration(text: str) -> int:
    """Nanoseconds of a Go duration (``1h30m``, ``1.5s``, ``500ms``, ``0``); ValueError
    when it is not one, or (as Go's ``time.ParseDuration`` says) out of the int64 range."""
    text = text.strip()
    if text in ("0", "+0", "-0"):
        return 0
    sign = -1 if text.startswith("-") else 1
    rest = text.lstrip("+-")
    total, position = 0.0, 0
    for match in _GO_TERM.finditer(rest):
        if match.start() != position:
            break
        if len(match.group(1).partition(".")[0]) > 19:  # more than any int64
            raise ValueError(f"{brief(text)} is out of range for a Go duration")
        total += float(match.group(1)) * _GO_UNITS[match.group(2)]
        position = match.end()
    if not rest or position != len(rest):
        raise ValueError(f"{brief(text)} is not a Go duration (like 1h30m, 90s or 500ms)")
    if total > INT64_MAX:
        raise ValueError(f"{brief(text)} is out of range for a Go duration (at most 2562047h)")
    return sign * round(total)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


class _Mapper:
    """One resource's fields into wire config; problems and warnings at their lines."""

    def __init__(
        self, document: Document, kind: str, problems: list[Problem], warnings: list[Problem]
    ):
        self.document = document
        self.kind = kind
        self.problems = problems
        self.warnings = warnings
        self.locations: dict[str, Location] = {}

    def at(self, field: str) -> Location:
        return self.document.where(f"spec.{field}")

    def duration(self, field: str, value: Any) -> int | None:
        if value in (None, ""):
            return None
        try:
            return go_duration(str(value))
        except ValueError as err:
            self.problems.append(Problem(self.at(field), field, str(err)))
            return None

    def unknown(self, field: str) -> None:
        message = f"{self.kind} field {field!r} has no mapping: not imported"
        self.warnings.append(Problem(self.at(field), field, message, warning=True))

    def note(self, wire: str, field: str) -> None:
        self.locations[wire] = self.at(field)


#: NACK's stream source fields, as the API names them.
_SOURCE_NAMES = {
    "name": "name",
    "optStartSeq": "opt_start_seq",
    "optStartTime": "opt_start_time",
    "filterSubject": "filter_subject",
}


def _placement(value: Mapping[str, Any] | None) -> dict[str, Any]:
    """A NACK placement: its cluster and tags, when set."""
    return {k: v for k, v in (value or {}).items() if k in ("cluster", "tags") and v}


def _external(value: Mapping[str, Any]) -> dict[str, str] | None:
    """A NACK source's other account or domain, as the API's ``external``."""
    if not (value.get("externalApiPrefix") or value.get("externalDeliverPrefix")):
        return None
    return {
        "api": value.get("externalApiPrefix", ""),
        "deliver": value.get("externalDeliverPrefix", ""),
    }


def _source(value: Mapping[str, Any], mapper: _Mapper, field: str) -> dict[str, Any]:
    source = {"name": value.get("name"), **renamed(value, _SOURCE_NAMES)}
    if (external := _external(value)) is not None:
        source["external"] = external
    transforms = value.get("subjectTransforms") or []
    if transforms:
        source["subject_transforms"] = [
            {"src": t.get("source"), "dest": t.get("dest")} for t in transforms
        ]
    mapper.note(field, field)
    return source


_STREAM_PLAIN = {
    "name": "name",
    "description": "description",
    "subjects": "subjects",
    "retention": "retention",
    "maxConsumers": "max_consumers",
    "maxMsgs": "max_msgs",
    "maxBytes": "max_bytes",
    "maxMsgSize": "max_msg_size",
    "storage": "storage",
    "discard": "discard",
    "replicas": "num_replicas",
    "metadata": "metadata",
}
_STREAM_FLAGS = {
    "noAck": "no_ack",
    "sealed": "sealed",
    "denyDelete": "deny_delete",
    "denyPurge": "deny_purge",
    "allowDirect": "allow_direct",
    "allowRollup": "allow_rollup_hdrs",
    "mirrorDirect": "mirror_direct",
    "discardPerSubject": "discard_new_per_subject",
    "allowMsgTtl": "allow_msg_ttl",
    "allowMsgCounter": "allow_msg_counter",
    "allowAtomicPublish": "allow_atomic",
    "allowMsgSchedules": "allow_msg_schedules",
}


def _stream(spec: Mapping[str, Any], m: _Mapper) -> dict[str, Any]:
    config = dict(JSM_STREAM)
    for field, value in spec.items():
        if field in _STREAM_PLAIN:
            if value not in (None, ""):
                config[_STREAM_PLAIN[field]] = value
                m.note(_STREAM_PLAIN[field], field)
        elif field in _STREAM_FLAGS:
            if value:
                config[_STREAM_FLAGS[field]] = True
                m.note(_STREAM_FLAGS[field], field)
        elif field == "maxMsgsPerSubject":
            if isinstance(value, int) and value > 0:
                config["max_msgs_per_subject"] = value
        elif field in ("maxAge", "duplicateWindow", "subjectDeleteMarkerTtl"):
            wire = {"maxAge": "max_age", "duplicateWindow": "duplicate_window"}.get(
                field, "subject_delete_marker_ttl"
            )
            if (nanos := m.duration(field, value)) is not None:
                config[wire] = nanos
                m.note(wire, field)
        elif field == "placement":
            if placement := _placement(value):
                config["placement"] = placement
        elif field == "mirror":
            if value:
                config["mirror"] = _source(value, m, field)
        elif field == "sources":
            if value:
                config["sources"] = [_source(item, m, field) for item in value]
        elif field == "compression":
            if value in ("s2", "none"):
                config["compression"] = value
        elif field == "subjectTransform":
            if value:
                config["subject_transform"] = {
                    "src": value.get("source"),
                    "dest": value.get("dest"),
                }
        elif field == "republish":
            if value:
                config["republish"] = {
                    "src": value.get("source"),
                    "dest": value.get("destination"),
                    "headers_only": bool(value.get("headers_only")),
                }
        elif field == "firstSequence":
            if value:
                config["first_seq"] = value
        elif field == "consumerLimits":
            limits: dict[str, Any] = {"max_ack_pending": (value or {}).get("maxAckPending", 0)}
            threshold = m.duration(field, (value or {}).get("inactiveThreshold"))
            if threshold is not None:
                limits["inactive_threshold"] = threshold
            config["consumer_limits"] = limits
        elif field == "persistMode":
            if value in ("async", "default"):
                config["persist_mode"] = value
        elif field not in CONNECTION_FIELDS:
            m.unknown(field)
    return config


_CONSUMER_PLAIN = {
    "description": "description",
    "deliverSubject": "deliver_subject",
    "deliverGroup": "deliver_group",
    "maxAckPending": "max_ack_pending",
    "maxWaiting": "max_waiting",
    "rateLimitBps": "rate_limit_bps",
    "maxRequestBatch": "max_batch",
    "maxRequestMaxBytes": "max_bytes",
    "replicas": "num_replicas",
    "metadata": "metadata",
    "maxDeliver": "max_deliver",
    "optStartSeq": "opt_start_seq",
    "optStartTime": "opt_start_time",
    "pauseUntil": "pause_until",
    "priorityGroups": "priority_groups",
}
_CONSUMER_DURATIONS = {
    "ackWait": "ack_wait",
    "heartbeatInterval": "idle_heartbeat",
    "maxRequestExpires": "max_expires",
    "inactiveThreshold": "inactive_threshold",
    "pinnedTtl": "priority_timeout",
}
_DELIVER = {
    "all": "all",
    "last": "last",
    "new": "new",
    "byStartSequence": "by_start_sequence",
    "byStartTime": "by_start_time",
    "lastPerSubject": "last_per_subject",
}


def _consumer(spec: Mapping[str, Any], m: _Mapper) -> dict[str, Any]:
    config: dict[str, Any] = dict(JSM_CONSUMER)
    name = spec.get("durableName")
    config.update(name=name, durable_name=name)
    m.note("name", "durableName")
    for field, value in spec.items():
        if field in _CONSUMER_PLAIN:
            if value not in (None, "", 0, [], {}):
                config[_CONSUMER_PLAIN[field]] = value
                m.note(_CONSUMER_PLAIN[field], field)
        elif field in _CONSUMER_DURATIONS:
            if (nanos := m.duration(field, value)) is not None:
                config[_CONSUMER_DURATIONS[field]] = nanos
                m.note(_CONSUMER_DURATIONS[field], field)
        elif field in ("ackPolicy", "replayPolicy"):
            if value:
                config[_snake(field)] = value
                m.note(_snake(field), field)
        elif field == "deliverPolicy":
            if value:
                if value not in _DELIVER:
                    m.problems.append(
                        Problem(m.at(field), field, f"unknown deliverPolicy {value!r}")
                    )
                else:
                    config["deliver_policy"] = _DELIVER[value]
                    m.note("deliver_policy", field)
        elif field == "filterSubject":
            if value:
                config["filter_subject"] = value
        elif field == "filterSubjects":
            if value:
                config["filter_subjects"] = list(value)
        elif field in ("flowControl", "headersOnly", "memStorage"):
            if value:
                config[{"memStorage": "mem_storage"}.get(field, _snake(field))] = True
        elif field == "backoff":
            steps = [m.duration(field, step) for step in value or []]
            if steps and None not in steps:
                config["backoff"] = steps
        elif field == "sampleFreq":
            if value not in (None, ""):
                config["sample_freq"] = f"{str(value).rstrip('%')}%"
        elif field == "priorityPolicy":
            if value not in (None, "", "none"):
                config["priority_policy"] = value
        elif field not in (*CONNECTION_FIELDS, "durableName", "streamName"):
            m.unknown(field)
    if config.get("deliver_policy") not in ("by_start_sequence",):
        config.pop("opt_start_seq", None)
    if config.get("deliver_policy") not in ("by_start_time",):
        config.pop("opt_start_time", None)
    return config


def _bucket_source(value: Mapping[str, Any]) -> dict[str, Any]:
    """A NACK stream source on a KeyValue bucket as a bucket source of the spec."""
    source = renamed(value, _SOURCE_NAMES)
    source["name"] = str(value.get("name", "")).removeprefix("KV_")
    if (external := _external(value)) is not None:
        source["external"] = external
    return source


_BUCKET_PLAIN = {
    "bucket": "name",
    "description": "description",
    "maxValueSize": "max_value_size",
    "history": "history",
    "maxBytes": "max_bytes",
    "storage": "storage",
    "replicas": "replicas",
    "metadata": "metadata",
}


def _bucket(spec: Mapping[str, Any], m: _Mapper) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for field, value in spec.items():
        if field in _BUCKET_PLAIN:
            if value not in (None, "", 0, {}):
                config[_BUCKET_PLAIN[field]] = value
                m.note(_BUCKET_PLAIN[field], field)
        elif field == "ttl":
            if (nanos := m.duration(field, value)) is not None and nanos:
                config["ttl"] = nanos
        elif field == "limitMarkerTtl":
            if value:  # a time.Duration in the Go type: nanoseconds as a number
                config["limit_marker_ttl"] = value
        elif field == "compression":
            if value:
                config["compression"] = True
        elif field == "placement":
            if placement := _placement(value):
                config["placement"] = placement
        elif field == "mirror" and m.kind == "KeyValue":
            if value:
                config["mirror"] = _bucket_source(value)
        elif field == "sources" and m.kind == "KeyValue":
            if value:
                config["sources"] = [_bucket_source(item) for item in value]
        elif field == "republish" and m.kind == "KeyValue":
            if value:
                config["republish"] = {
                    "src": value.get("source"),
                    "dest": value.get("destination"),
                    "headers_only": bool(value.get("headers_only")),
                }
        elif field not in CONNECTION_FIELDS:
            m.unknown(field)
    return config


_PLACEMENT: Shape = {"tags": [None]}
_SECRET: Shape = {"secret": {}}
#: What the mappings read as objects and lists, per kind (an Account: its whole body).
SHAPES: Mapping[str, Shape] = {
    "Stream": {
        "placement": _PLACEMENT,
        "consumerLimits": {},
        "mirror": {"subjectTransforms": [{}]},
        "sources": [{"subjectTransforms": [{}]}],
        "subjectTransform": {},
        "republish": {},
    },
    "Consumer": {"backoff": [None], "filterSubjects": [None]},
    "KeyValue": {"placement": _PLACEMENT, "mirror": {}, "sources": [{}], "republish": {}},
    "ObjectStore": {"placement": _PLACEMENT},
    "Account": {
        "metadata": {},
        "spec": {
            "servers": [None],
            "creds": _SECRET,
            "nkey": _SECRET,
            "user": _SECRET,
            "token": _SECRET,
            "tls": {},
        },
    },
}

_MAPPERS = {"Stream": _stream, "Consumer": _consumer, "KeyValue": _bucket, "ObjectStore": _bucket}


#: An ``ackWait`` below this redelivers at once (the server keeps what it is sent).
SHORTEST_ACK_WAIT = 1_000_000


def _ack_wait_warning(spec: Mapping[str, Any], config: Mapping[str, Any], m: _Mapper) -> None:
    """Warn where a consumer that acknowledges waits less than SHORTEST_ACK_WAIT."""
    wait = config.get("ack_wait")
    if config.get("ack_policy") == "none" or not isinstance(wait, int) or wait >= SHORTEST_ACK_WAIT:
        return
    written = spec.get("ackWait")
    given = "NACK's CRD default, ackWait not set" if written in (None, "") else "as written"
    message = (
        f"ackWait {written or CRD_DEFAULTS['Consumer']['ackWait']} ({given}): the server keeps "
        "it as it is, so a message not acknowledged at once is redelivered at once, over "
        "and over: set ackWait (30s is the usual value)"
    )
    m.warnings.append(Problem(m.at("ackWait"), "ack_wait", message, warning=True))


#: Documents by the Account their resource names (``spec.account``; None: none named).
ByAccount = dict[str | None, list[Document]]


def documents(
    manifests: list[Document], problems: list[Problem], warnings: list[Problem]
) -> list[Document]:
    """The spec documents of NACK's manifests (other Kubernetes objects are skipped)."""
    return [doc for docs in by_account(manifests, problems, warnings).values() for doc in docs]


def by_account(
    manifests: list[Document], problems: list[Problem], warnings: list[Problem]
) -> ByAccount:
    """The spec documents of NACK's manifests by the Account each names."""
    out: ByAccount = {}
    for manifest in manifests:
        body = manifest.body
        api, kind = str(body.get("apiVersion", "")), str(body.get("kind", ""))
        if not api.startswith(GROUP):
            name = (body.get("metadata") or {}).get("name") if isinstance(body, dict) else None
            what = (
                f"{kind or 'a document'} {name!r}"
                if isinstance(name, str)
                else kind or "a document"
            )
            message = f"{what} ({api or 'no apiVersion'}) is not a NACK resource: skipped"
            warnings.append(Problem(manifest.source, "", message, warning=True))
            continue
        version = api[len(GROUP) :]
        if version not in VERSIONS:
            message = f"{kind} of {api}: unknown NACK API version (known: {', '.join(VERSIONS)})"
            problems.append(Problem(manifest.where("apiVersion"), "apiVersion", message))
            continue
        if kind == "Account":
            continue  # connections: account_environments
        if kind not in KINDS:
            message = f"{kind} ({api}) is not imported: not managed by this tool"
            warnings.append(Problem(manifest.source, "", message, warning=True))
            continue
        spec = body.get("spec")
        if not isinstance(spec, dict):
            problems.append(Problem(manifest.source, "spec", "a NACK resource needs a spec"))
            continue
        wrong = misshapen(spec, SHAPES[kind], "spec")
        problems += [Problem(manifest.where(path), path, message) for path, message in wrong]
        if wrong:
            continue
        mapper = _Mapper(manifest, kind, problems, warnings)
        filled = {**CRD_DEFAULTS[kind], **spec}
        config = _MAPPERS[kind](filled, mapper)
        head: dict[str, Any] = {"kind": kind}
        if kind == "Consumer":
            head["stream"] = spec.get("streamName")
            mapper.note("stream", "streamName")
            _ack_wait_warning(spec, config, mapper)
        account = spec.get("account")
        if account:
            mapper.note("account", "account")  # where an unknown Account is reported
        document = Document(
            body={**head, **config}, source=manifest.source, locations=mapper.locations
        )
        out.setdefault(str(account) if account else None, []).append(document)
    return out


def read(paths: list[Path], *, strict: bool = False) -> ImportResult:
    """The specs of NACK manifests (YAML files or folders), validated, and the
    ``Account`` resources as project environments, each with the specs of the resources
    naming it (validated apart: each Account is its own namespace of names); raises
    SpecError listing every problem (bad duration, unknown version, ...)."""
    grouped, warnings, environments = load_all(paths)
    problems: list[Problem] = []
    found: dict[str | None, ImportResult] = {}
    for account, docs in grouped.items():
        try:
            found[account] = validated(docs, warnings, strict=strict)
        except SpecError as err:
            problems += err.problems
    if problems:
        raise SpecError(problems)
    shared = found.pop(None, ImportResult([]))
    own = {account: result.specs for account, result in found.items() if account is not None}
    return ImportResult(shared.specs, warnings, environments, by_environment=own)


def load_all(
    paths: list[Path],
) -> tuple[ByAccount, list[Problem], dict[str, dict[str, Any]]]:
    """Spec documents from NACK manifests (YAML files or folders) by the Account they
    name, the warnings, and the ``Account`` resources as project environments. Raises
    SpecError listing every problem (bad duration, unknown version, an Account named
    that the manifests do not hold, ...)."""
    problems: list[Problem] = []
    warnings: list[Problem] = []
    manifests: list[Document] = []
    for path in _files(paths):
        manifests += read_yaml_trees(path)
    grouped = by_account(manifests, problems, warnings)
    environments = account_environments(manifests, warnings, problems)
    _check_accounts(grouped, environments, problems, warnings)
    if problems:
        raise SpecError(problems)
    return grouped, warnings, environments


def _check_accounts(
    grouped: ByAccount,
    environments: Mapping[str, Any],
    problems: list[Problem],
    warnings: list[Problem],
) -> None:
    """A resource naming an Account the manifests do not hold is an error (its specs
    would have no environment); when some resources name an Account, each naming none
    is a warning (NACK creates it with its default connection, not an Account's)."""
    for account, docs in grouped.items():
        if account is not None and account not in environments:
            message = (
                f"Account {brief(account)} is not among the manifests: import its Account "
                "resource too, so its resources get an environment of their own"
            )
            problems += [Problem(d.where("account"), "account", message) for d in docs]
    if len(grouped) > 1:
        message = (
            "names no Account: NACK creates it with its default connection; it is written "
            "with the specs every environment shares"
        )
        warnings += [Problem(d.source, "", message, warning=True) for d in grouped.get(None, [])]


def _files(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.suffix in (".yml", ".yaml"))
        else:
            found.append(path)
    return found


#: Which Account derived each environment variable, and where (see :func:`_variable`).
Claimed = dict[str, tuple[str, Location]]


def _variable(
    account: str, what: str, where: Location, claimed: Claimed, problems: list[Problem]
) -> str:
    """The environment variable holding one secret of one Account: ``NACK_<ACCOUNT>_<WHAT>``
    in upper case, every run of other characters one ``_``.

    That readable form is not one-to-one (``team-a`` and ``team.a`` both give
    ``NACK_TEAM_A_...``), and two Accounts reading one variable would connect with the
    same secret. So each variable is claimed by the first Account deriving it, and a
    second Account deriving it is a problem naming both (``claimed`` holds the claims
    of one import)."""
    variable = "NACK_" + re.sub(r"[^A-Z0-9]+", "_", f"{account}_{what}".upper()).strip("_")
    holder, held_at = claimed.setdefault(variable, (account, where))
    if holder != account:
        message = (
            f"Accounts {brief(holder)} ({held_at}) and {brief(account)} both derive the "
            f"environment variable {variable}: rename one Account"
        )
        problems.append(Problem(where, "metadata.name", message))
    return variable


#: What Kubernetes accepts as an object's name (an RFC 1123 subdomain): lowercase letters,
#: digits, ``-`` and ``.``, each dot-separated label starting and ending alphanumeric.
_KUBERNETES_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def account_environments(
    manifests: list[Document], warnings: list[Problem], problems: list[Problem]
) -> dict[str, dict[str, Any]]:
    """NACK ``Account`` resources as environments of a project file, by account name.

    Servers, a creds file, an nkey seed file, a user and TLS files are copied. A password
    or token becomes ``{env: NACK_<ACCOUNT>_PASSWORD}`` (the project file holds no
    secret), and so does a creds or nkey kept in a Kubernetes Secret; each such variable
    is a warning naming what to put in it. Two Accounts of one name (in two namespaces),
    or whose names derive the same variable (:func:`_variable`), are problems naming both;
    a server URL carrying credentials is a problem at its line, the URL not shown.
    """
    found: dict[str, dict[str, Any]] = {}
    first: dict[str, Location] = {}
    claimed: Claimed = {}
    for manifest in manifests:
        body = manifest.body
        if not str(body.get("apiVersion", "")).startswith(GROUP) or body.get("kind") != "Account":
            continue
        wrong = misshapen(body, SHAPES["Account"], "")
        problems += [Problem(manifest.where(path), path, message) for path, message in wrong]
        if wrong:
            continue
        name = str((body.get("metadata") or {}).get("name", ""))
        where = manifest.where("metadata.name")
        if not _KUBERNETES_NAME.fullmatch(name) or len(name) > 253:
            # the name becomes a folder (OUT-<name>) and an environment: '../x' would
            # write outside --out, 'Team' and 'team' share a folder on some disks
            message = f"Account {brief(name)} is not a Kubernetes object name (RFC 1123)"
            problems.append(Problem(where, "metadata.name", message))
        if name in first:
            message = f"a second Account named {brief(name)} (the first is at {first[name]})"
            problems.append(Problem(where, "metadata.name", message))
            continue
        first[name] = where
        found[name] = _environment(name, manifest, warnings, claimed, problems)
    return found


def _environment(
    name: str,
    manifest: Document,
    warnings: list[Problem],
    claimed: Claimed,
    problems: list[Problem],
) -> dict[str, Any]:
    spec: Mapping[str, Any] = manifest.body.get("spec") or {}
    env: dict[str, Any] = {"description": f"NACK Account {name} ({manifest.source})"}
    if spec.get("servers"):
        env["servers"] = list(spec["servers"])
    for index, url in enumerate(env.get("servers", [])):
        if userinfo(split_scheme(str(url))[1]) is not None:  # the project file's rule
            message = (
                f"Account {name}: a server URL carries credentials (not shown); the "
                "project file holds no secret: keep them in the Account's user or token "
                "Secret, out of the URL"
            )
            at = f"spec.servers.{index}"
            problems.append(Problem(manifest.where(at), at, message))

    def secret(field: str, what: str, source: str) -> None:
        variable = _variable(name, what, manifest.where("metadata.name"), claimed, problems)
        env[field] = {"env": variable}
        message = f"Account {name}: set {variable} to {source} (the project file holds no secret)"
        warnings.append(Problem(manifest.where(f"spec.{field}"), field, message, warning=True))

    for field, inner in (("creds", "file"), ("nkey", "seed")):
        value = spec.get(field) or {}
        if value.get(inner):
            env[field] = value[inner]
        elif value.get("secret"):
            holder = value["secret"].get("name")
            secret(field, f"{field}_file", f"the path of the {field} file of Secret {holder}")
    user = spec.get("user") or {}
    if user.get("user"):
        env["user"] = user["user"]
    if user.get("password") or (user.get("secret") or {}).get("name"):
        secret("password", "password", "the password")
    token = spec.get("token") or {}
    if token.get("token") or (token.get("secret") or {}).get("name"):
        secret("token", "token", "the token")
    tls = spec.get("tls") or {}
    files = {k: tls[k] for k in ("ca", "cert", "key") if tls.get(k)}
    if files:
        env["tls"] = files
    return env
