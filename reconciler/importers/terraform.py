"""Terraform's JetStream provider (registry ``nats-io/jetstream``) as spec documents.

Two inputs, one mapping:

- ``terraform.tfstate`` (JSON, state format 4): every attribute the provider recorded,
  its defaults included, with its line.
- ``.tf`` files (HCL, read one block at a time by :mod:`reconciler.importers.hcl`): the
  attributes written, the provider's schema defaults for the others. The ``.tf`` files of
  one folder are one module: their expressions are worked out as Terraform would
  (:mod:`reconciler.importers.hcl_eval`): literals, strings with ``${...}``, integer
  arithmetic (``60 * 60 * 24 * 365``), references to ``var.*`` defaults, ``local.*``
  values and any attribute of the module's resources (``jetstream_kv_bucket.test.name``;
  a ``stream_id`` of ``jetstream_stream.ORDERS.id`` is that stream's name), across its
  files. Any other expression (functions, conditionals, a variable without a default,
  ``data``/``module`` values, a cycle) is reported with its file and line, naming the
  reference, and stops the import: a value that cannot be known is never guessed.
  Numbers must fit the provider's int64; a block, list or number where the mapping reads
  another shape (:data:`SHAPES`) is an error at its line.

The mapping follows the provider's own translation to the JetStream API (its
``streamConfigFromResourceData`` and ``consumerConfigFromResourceData``, release 0.2):
- durations in seconds become nanoseconds;
- ``ack`` becomes ``no_ack``;
- ``deliver_all``/``deliver_last``/``deliver_new``/``deliver_last_per_subject``/
  ``stream_sequence``/``start_time`` become ``deliver_policy``;
- ``sample_freq`` N becomes ``"N%"``;
- ``placement_*``, ``republish_*``, ``mirror``/``source`` blocks become the API's objects.

An attribute the mapping does not know is reported as a warning with its line, never
dropped silently. So are resources this tool does not manage
(``jetstream_stream_template``). A ``jetstream_kv_entry`` becomes a ``KeyValueEntry``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from reconciler.errors import Problem, SpecError, brief
from reconciler.importers import ImportResult, hcl, hcl_eval
from reconciler.importers.imported import Shape, misshapen, renamed, validated
from reconciler.locations import Location
from reconciler.specs.document import Document
from reconciler.specs.loader import read_json_tree

SECOND = 1_000_000_000
KINDS = {
    "jetstream_stream": "Stream",
    "jetstream_consumer": "Consumer",
    "jetstream_kv_bucket": "KeyValue",
    "jetstream_obj_bucket": "ObjectStore",
    "jetstream_kv_entry": "KeyValueEntry",
}
NOT_IMPORTED = {
    "jetstream_stream_template": "stream templates no longer exist in nats-server 2.10+",
}
STREAM_ID_PREFIX = "JETSTREAM_STREAM_"
#: The longest expression evaluated (the rule lives in ``hcl_eval``).
MAX_EXPRESSION = hcl_eval.MAX_EXPRESSION

#: The provider's schema defaults: what a ``.tf`` file leaves out, it sends anyway.
DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "jetstream_stream": {
        "discard": "old",
        "discard_new_per_subject": False,
        "max_msgs": -1,
        "max_msgs_per_subject": -1,
        "max_bytes": -1,
        "max_age": 0,
        "duplicate_window": 120,
        "max_msg_size": -1,
        "storage": "file",
        "ack": True,
        "retention": "limits",
        "compression": "none",
        "max_consumers": -1,
        "replicas": 1,
        "deny_delete": False,
        "deny_purge": False,
        "allow_rollup_hdrs": False,
        "allow_direct": True,
        "allow_msg_ttl": False,
        "allow_msg_schedules": False,
        "first_seq": 0,
        "allow_batched": False,
    },
    "jetstream_consumer": {
        "ack_policy": "explicit",
        "ack_wait": 30,
        "max_delivery": -1,
        "replay_policy": "instant",
        "sample_freq": 0,
        "ratelimit": 0,
        "max_ack_pending": 20000,
        "flow_control": False,
        "headers_only": False,
        "max_batch": 0,
        "replicas": 0,
        "memory": False,
    },
    "jetstream_kv_bucket": {
        "storage": "file",
        "history": 5,
        "ttl": 0,
        "max_value_size": -1,
        "max_bucket_size": -1,
        "replicas": 1,
        "limit_marker_ttl": 0,
    },
    "jetstream_obj_bucket": {
        "storage": "file",
        "ttl": 0,
        "max_bucket_size": -1,
        "replicas": 1,
        "compression": False,
    },
}


@dataclass
class Resource:
    """One resource of the provider, as Terraform holds or declares it."""

    type: str
    label: str  # the resource's name in Terraform (``ORDERS_NEW``)
    attrs: dict[str, Any]
    source: Location
    where: dict[str, Location] = field(default_factory=dict)

    def at(self, attr: str) -> Location:
        return self.where.get(attr, self.source)


# --- reading ------------------------------------------------------------------------------


def read_state(path: Path, problems: list[Problem]) -> list[Resource]:
    """The provider's resources in a ``terraform.tfstate`` (one per instance). A value
    the state marks sensitive is a problem at its line, never copied (:func:`_unshown`)."""
    tree = read_json_tree(path)
    lines = _attribute_locations(tree.locations)
    resources = []
    for index, item in enumerate(tree.body.get("resources") or []):
        if not isinstance(item, dict) or item.get("mode", "managed") != "managed":
            continue
        kind = str(item.get("type", ""))
        if not kind.startswith("jetstream_"):
            continue
        for number, instance in enumerate(item.get("instances") or []):
            attrs = instance.get("attributes") if isinstance(instance, dict) else None
            if not isinstance(attrs, dict):
                continue
            where = lines.get(f"resources.{index}.instances.{number}", {})
            source = tree.where(f"resources.{index}")
            resource = Resource(kind, str(item.get("name", "")), dict(attrs), source, where)
            _unshown(resource, instance.get("sensitive_attributes"), problems)
            resources.append(resource)
    return resources


def _unshown(resource: Resource, marked: Any, problems: list[Problem]) -> None:
    """Take out each attribute set that the state lists in ``sensitive_attributes`` (a
    value made from a ``sensitive`` variable: Terraform's list of paths, each a list of
    steps, the first ``{"type": "get_attr", "value": NAME}``), a problem at its line:
    as a sensitive variable of a ``.tf`` file, its value is never copied into a spec
    (files for git) nor shown."""
    paths = marked if isinstance(marked, list) else []
    firsts = [path[0] if isinstance(path, list) and path else path for path in paths]
    names = {
        step.get("value")
        for step in firsts
        if isinstance(step, dict) and step.get("type") == "get_attr"
    }
    for name in sorted(n for n in names if isinstance(n, str)):
        if name in resource.attrs and not _empty(resource.attrs[name]):
            message = (
                f"{resource.type}.{resource.label}.{name} is sensitive in the state "
                "(sensitive_attributes): its value is not copied nor shown; write this "
                "resource's spec by hand (a KeyValueEntry's value with secret: true)"
            )
            problems.append(Problem(resource.at(name), name, message))
            del resource.attrs[name]


def _attribute_locations(locations: Mapping[str, Location]) -> dict[str, dict[str, Location]]:
    """``resources.I.instances.N.attributes.NAME`` locations grouped by instance
    (``resources.I.instances.N``), in one pass over the state's locations."""
    grouped: dict[str, dict[str, Location]] = {}
    for key in locations:
        parts = key.split(".")
        if len(parts) == 6 and parts[0] == "resources" and parts[4] == "attributes":
            grouped.setdefault(".".join(parts[:4]), {})[parts[5]] = locations[key]
    return grouped


def read_module(
    paths: list[Path], problems: list[Problem], warnings: list[Problem]
) -> list[Resource]:
    """The provider's resources declared in the ``.tf`` files of one folder (a Terraform
    module: its files share variables, locals and resources), each read one block at a
    time (:func:`reconciler.importers.hcl.declarations`), expressions resolved where they
    can be (:class:`~reconciler.importers.hcl_eval.Module`; ``problems`` gets the others,
    at the line of the attribute holding them)."""
    module = hcl_eval.Module(defaults=DEFAULTS, ids={"jetstream_stream": STREAM_ID_PREFIX})
    resources = []
    counted: list[tuple[Resource, Any]] = []  # resources with a ``count``, and its value
    first: dict[str, Location] = {}  # where each variable, local and resource is declared
    for path in paths:
        name = str(path)
        for block in hcl.declarations(path):
            if _declared_twice(block, name, first, problems):
                continue
            if block.kind == hcl.VARIABLE:
                module.declare_variable(block.label, block.body)
            elif block.kind == hcl.LOCALS:
                module.locals.update((k, v) for k, v in block.body.items() if k[:2] != "__")
            elif block.kind.startswith("jetstream_"):
                attrs = {k: v for k, v in block.body.items() if k[:2] != "__" and k not in META}
                where = {a: Location(name, n) for a, n in block.lines.items()}
                resource = Resource(
                    block.kind, block.label, attrs, Location(name, block.line), where
                )
                for meta in sorted(UNMAPPED_META.keys() & block.body.keys()):
                    message = f"{block.kind}.{block.label}: {UNMAPPED_META[meta]}, not imported"
                    warnings.append(Problem(resource.at(meta), meta, message, warning=True))
                if "for_each" in block.body or "count" in block.body:
                    counted.append((resource, block.body.get("for_each", block.body.get("count"))))
                    continue  # named with an index (``x[0].name``): not a reference here
                resources.append(resource)
                module.resources[(block.kind, block.label)] = attrs
    for resource, count in counted:
        if _one_instance(resource, count, module, problems, warnings):
            resources.append(resource)
            module.resources[(resource.type, resource.label)] = resource.attrs
    for resource in resources:
        _resolve(resource, module, problems)
    return resources


def _declared_twice(
    block: hcl.Block, file: str, first: dict[str, Location], problems: list[Problem]
) -> bool:
    """Whether ``block`` declares again a variable, local value or resource of the module
    (Terraform refuses such a module: which one to import would be a guess); a problem
    at its line naming the first. ``first`` collects the declarations seen."""
    if block.kind == hcl.LOCALS:
        names = [
            (f"local.{k}", block.lines.get(k, block.line)) for k in block.body if k[:2] != "__"
        ]
    elif block.kind == hcl.VARIABLE:
        names = [(f"var.{block.label}", block.line)]
    else:
        names = [(f"{block.kind}.{block.label}", block.line)]
    again = False
    for what, line in names:
        where = Location(file, line)
        if what in first:
            message = f"{what} is declared twice (the first at {first[what]})"
            problems.append(Problem(where, "", message))
            again = True
        first.setdefault(what, where)
    return again


#: Terraform's meta-arguments: how many instances, after what, by which provider, what
#: ``terraform apply`` may change; none is a setting of the resource.
META: Final = frozenset(
    {"count", "for_each", "depends_on", "provider", "lifecycle", "provisioner", "connection"}
)


#: The meta-arguments that say something this tool's specs do not (a warning each);
#: ``depends_on`` needs no warning: apply orders streams, sources and consumers itself.
UNMAPPED_META: Final[Mapping[str, str]] = {
    "provider": "provider names another provider configuration (another server or "
    "account?) that its spec does not keep",
    "lifecycle": "lifecycle is Terraform's (this tool's own is the spec's lifecycle block)",
    "provisioner": "provisioner runs commands",
    "connection": "connection is for provisioners",
}


def _one_instance(
    resource: Resource,
    count: Any,
    module: hcl_eval.Module,
    problems: list[Problem],
    warnings: list[Problem],
) -> bool:
    """Whether a resource with ``count`` or ``for_each`` is one instance (``count = 1``).
    ``count = 0`` makes none: not imported (a warning); more instances, a ``for_each`` or
    a count not known are a problem (they would be one spec)."""
    what = f"{resource.type}.{resource.label}"
    meta = "for_each" if "for_each" in resource.where and "count" not in resource.where else "count"
    try:
        number = None if meta == "for_each" else module.value(count)
    except (hcl_eval.Unresolved, hcl_eval.Unreadable):
        number = None
    if number in ("0", "1"):  # a string Terraform converts ("${var.n}")
        number = int(number)
    if number == 0 and type(number) is int:
        message = f"{what} has count = 0: Terraform makes no instance of it, not imported"
        warnings.append(Problem(resource.at(meta), meta, message, warning=True))
        return False
    if number == 1 and type(number) is int:
        return True
    message = (
        f"{what}: {meta} makes an instance per "
        f"{'element' if meta == 'for_each' else 'count'} (or an unknown number): one spec "
        "each is not known from the files; import terraform.tfstate, which holds every instance"
    )
    problems.append(Problem(resource.at(meta), meta, message))
    return False


def _resolve(resource: Resource, module: hcl_eval.Module, problems: list[Problem]) -> None:
    """Replace each attribute by its value; report those that cannot be known."""
    for attr in list(resource.attrs):
        try:
            resource.attrs[attr] = module.attribute(resource.type, resource.label, attr)
        except hcl_eval.Unreadable as err:
            what = f"{resource.type}.{resource.label}.{attr}"
            problems.append(Problem(resource.at(attr), attr, f"{what}: {err}"))
            del resource.attrs[attr]
        except hcl_eval.Unresolved as err:
            what = f"{resource.type}.{resource.label}.{attr}"
            because = f": {err.why}" if err.why else ""
            # the state marks a sensitive variable's value too (read_state refuses it)
            hint = (
                "write this resource's spec by hand (a KeyValueEntry's value with secret: true)"
                if err.sensitive
                else "write its value, or import terraform.tfstate, which holds every value"
            )
            shown = "" if err.sensitive else f" {brief(err.expression)}"  # sensitive("...")
            message = f"{what}: the expression{shown} is not resolved{because} ({hint})"
            problems.append(Problem(resource.at(attr), attr, message))
            del resource.attrs[attr]


# --- mapping ------------------------------------------------------------------------------


def _seconds(value: Any) -> Any:
    return value * SECOND if isinstance(value, int) and not isinstance(value, bool) else value


def _duration(config: dict[str, Any], field: str, value: Any) -> None:
    """Set a duration given in seconds; 0 (or nothing) is the API's "unset", left out."""
    if value not in (None, "", 0):
        config[field] = _seconds(value)


def _empty(value: Any) -> bool:
    return value is None or value in ("", [], {})


#: The provider's mirror and source block fields, as the API names them.
_SOURCE_NAMES = {
    "start_seq": "opt_start_seq",
    "start_time": "opt_start_time",
    "filter_subject": "filter_subject",
}


def _source(block: Mapping[str, Any]) -> dict[str, Any]:
    source = {"name": block.get("name"), **renamed(block, _SOURCE_NAMES)}
    external = block.get("external") or []
    if external:
        source["external"] = {"api": external[0].get("api"), "deliver": external[0].get("deliver")}
    transforms = block.get("subject_transform") or []
    if transforms:
        source["subject_transforms"] = [
            {"src": t.get("source"), "dest": t.get("destination")} for t in transforms
        ]
    consumer = block.get("consumer") or []
    if consumer:
        source["consumer"] = {
            k: v for k, v in consumer[0].items() if k in ("name", "deliver_subject") and v
        }
    return source


_STREAM_FIELDS = {
    "name": "name",
    "subjects": "subjects",
    "description": "description",
    "discard": "discard",
    "discard_new_per_subject": "discard_new_per_subject",
    "max_msgs": "max_msgs",
    "max_msgs_per_subject": "max_msgs_per_subject",
    "max_bytes": "max_bytes",
    "max_msg_size": "max_msg_size",
    "storage": "storage",
    "retention": "retention",
    "compression": "compression",
    "max_consumers": "max_consumers",
    "replicas": "num_replicas",
    "deny_delete": "deny_delete",
    "deny_purge": "deny_purge",
    "allow_rollup_hdrs": "allow_rollup_hdrs",
    "allow_direct": "allow_direct",
    "allow_msg_ttl": "allow_msg_ttl",
    "allow_msg_counter": "allow_msg_counter",
    "allow_atomic": "allow_atomic",
    "allow_msg_schedules": "allow_msg_schedules",
    "allow_batched": "allow_batched",
    "metadata": "metadata",
}
_STREAM_SECONDS = {
    "max_age": "max_age",
    "duplicate_window": "duplicate_window",
    "subject_delete_marker_ttl": "subject_delete_marker_ttl",
}
_STREAM_HANDLED = {
    "id",
    "ack",
    "placement_cluster",
    "placement_tags",
    "placement_preferred",
    "subject_transform",
    "republish_source",
    "republish_destination",
    "republish_headers_only",
    "mirror",
    "mirror_direct",
    "source",
    "max_ack_pending",
    "inactive_threshold",
    "first_seq",
    "persist_mode",
}


def _placement(attrs: Mapping[str, Any]) -> dict[str, Any] | None:
    placement: dict[str, Any] = {}
    if attrs.get("placement_cluster"):
        placement["cluster"] = attrs["placement_cluster"]
        if attrs.get("placement_tags"):
            placement["tags"] = list(attrs["placement_tags"])
    if attrs.get("placement_preferred"):
        placement["preferred"] = attrs["placement_preferred"]
    return placement or None


def _stream(attrs: Mapping[str, Any], unknown: Callable[[str], None]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for attr, value in attrs.items():
        if attr in _STREAM_FIELDS:
            if not _empty(value):
                config[_STREAM_FIELDS[attr]] = value
        elif attr in _STREAM_SECONDS:
            _duration(config, _STREAM_SECONDS[attr], value)
        elif attr not in _STREAM_HANDLED:
            unknown(attr)
    if "ack" in attrs:
        config["no_ack"] = not attrs["ack"]
    if (placement := _placement(attrs)) is not None:
        config["placement"] = placement
    transforms = attrs.get("subject_transform") or []
    if transforms:
        first = transforms[0]
        config["subject_transform"] = {"src": first.get("source"), "dest": first.get("destination")}
    if attrs.get("republish_source"):
        config["republish"] = {
            "src": attrs["republish_source"],
            "dest": attrs.get("republish_destination", ""),
            "headers_only": bool(attrs.get("republish_headers_only")),
        }
    mirror = attrs.get("mirror") or []
    if mirror:
        config["mirror"] = _source(mirror[0])
        if attrs.get("mirror_direct"):
            config["mirror_direct"] = True
    sources = attrs.get("source") or []
    if sources:
        config["sources"] = [_source(block) for block in sources]
    limits: dict[str, Any] = {}
    if attrs.get("max_ack_pending"):
        limits["max_ack_pending"] = attrs["max_ack_pending"]
    if attrs.get("inactive_threshold"):
        limits["inactive_threshold"] = _seconds(attrs["inactive_threshold"])
    if limits:
        config["consumer_limits"] = limits
    if attrs.get("first_seq"):
        config["first_seq"] = attrs["first_seq"]
    if attrs.get("persist_mode") == "async":
        config["persist_mode"] = "async"
    return config


_CONSUMER_FIELDS = {
    "description": "description",
    "filter_subject": "filter_subject",
    "max_delivery": "max_deliver",
    "delivery_subject": "deliver_subject",
    "ratelimit": "rate_limit_bps",
    "max_ack_pending": "max_ack_pending",
    "flow_control": "flow_control",
    "headers_only": "headers_only",
    "max_batch": "max_batch",
    "max_bytes": "max_bytes",
    "replicas": "num_replicas",
    "memory": "mem_storage",
    "replay_policy": "replay_policy",
    "ack_policy": "ack_policy",
    "metadata": "metadata",
    "priority_groups": "priority_groups",
}
_CONSUMER_SECONDS = {
    "ack_wait": "ack_wait",
    "heartbeat": "idle_heartbeat",
    "max_expires": "max_expires",
    "inactive_threshold": "inactive_threshold",
    "priority_timeout": "priority_timeout",
}
_CONSUMER_HANDLED = {
    "id",
    "stream_id",
    "durable_name",
    "sample_freq",
    "delivery_group",
    "max_waiting",
    "backoff",
    "deliver_all",
    "deliver_last",
    "deliver_new",
    "deliver_last_per_subject",
    "stream_sequence",
    "start_time",
    "filter_subjects",
    "priority_policy",
}


def _consumer(attrs: Mapping[str, Any], unknown: Callable[[str], None]) -> dict[str, Any]:
    name = attrs.get("durable_name")
    config: dict[str, Any] = {"name": name, "durable_name": name}
    for attr, value in attrs.items():
        if attr in _CONSUMER_FIELDS:
            if not _empty(value):
                config[_CONSUMER_FIELDS[attr]] = value
        elif attr in _CONSUMER_SECONDS:
            _duration(config, _CONSUMER_SECONDS[attr], value)
        elif attr not in _CONSUMER_HANDLED:
            unknown(attr)
    if int(attrs.get("sample_freq") or 0):  # 0 is the server's own "no sampling": not written
        config["sample_freq"] = f"{int(attrs['sample_freq'])}%"
    if config.get("deliver_subject"):
        if attrs.get("delivery_group"):
            config["deliver_group"] = attrs["delivery_group"]
    elif attrs.get("max_waiting"):
        config["max_waiting"] = attrs["max_waiting"]
    if attrs.get("backoff"):
        config["backoff"] = [_seconds(step) for step in attrs["backoff"]]
    config["deliver_policy"] = "all"
    for flag, policy in (
        ("deliver_all", "all"),
        ("deliver_last", "last"),
        ("deliver_new", "new"),
        ("deliver_last_per_subject", "last_per_subject"),
    ):
        if attrs.get(flag):
            config["deliver_policy"] = policy
            break
    else:
        if attrs.get("stream_sequence"):
            config["deliver_policy"] = "by_start_sequence"
            config["opt_start_seq"] = attrs["stream_sequence"]
        elif attrs.get("start_time"):
            config["deliver_policy"] = "by_start_time"
            config["opt_start_time"] = attrs["start_time"]
    subjects = list(attrs.get("filter_subjects") or [])
    if len(subjects) == 1:
        config["filter_subject"] = subjects[0]
    elif len(subjects) > 1:
        config["filter_subjects"] = subjects
        config.pop("filter_subject", None)
    if attrs.get("priority_policy") not in (None, "", "none"):
        config["priority_policy"] = attrs["priority_policy"]
    return config


_BUCKET_FIELDS = {
    "name": "name",
    "description": "description",
    "storage": "storage",
    "history": "history",
    "max_value_size": "max_value_size",
    "max_bucket_size": "max_bytes",
    "replicas": "replicas",
    "compression": "compression",
}


def _bucket(attrs: Mapping[str, Any], unknown: Callable[[str], None]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for attr, value in attrs.items():
        if attr in _BUCKET_FIELDS:
            if not _empty(value):
                config[_BUCKET_FIELDS[attr]] = value
        elif attr in ("ttl", "limit_marker_ttl"):
            _duration(config, attr, value)
        elif attr not in ("id", "placement_cluster", "placement_tags"):
            unknown(attr)
    if (placement := _placement(attrs)) is not None:
        config["placement"] = placement
    return config


#: For errors: the spec field each Terraform attribute becomes, per resource type.
_SPEC_FIELD: Mapping[str, Mapping[str, str]] = {
    "jetstream_stream": {
        **_STREAM_FIELDS,
        **_STREAM_SECONDS,
        "ack": "no_ack",
        "placement_cluster": "placement",
        "placement_tags": "placement",
        "mirror": "mirror",
        "source": "sources",
        "subject_transform": "subject_transform",
        "republish_source": "republish",
        "republish_destination": "republish",
    },
    "jetstream_consumer": {
        **_CONSUMER_FIELDS,
        **_CONSUMER_SECONDS,
        "durable_name": "name",
        "stream_id": "stream",
        "sample_freq": "sample_freq",
        "backoff": "backoff",
        "stream_sequence": "opt_start_seq",
        "start_time": "opt_start_time",
        "filter_subjects": "filter_subjects",
    },
    "jetstream_kv_bucket": {**_BUCKET_FIELDS, "ttl": "ttl"},
    "jetstream_obj_bucket": {**_BUCKET_FIELDS, "ttl": "ttl"},
    "jetstream_kv_entry": {"bucket": "bucket", "key": "key", "value": "value"},
}


#: The attributes of :data:`_SPEC_FIELD` in its order, by resource type.
_SPEC_ORDER: Mapping[str, Mapping[str, int]] = {
    kind: {attr: index for index, attr in enumerate(fields)} for kind, fields in _SPEC_FIELD.items()
}


def _spec_locations(resource: Resource) -> dict[str, Location]:
    """Where each spec field of ``resource`` was written: the location of the attribute
    it comes from (:data:`_SPEC_FIELD`), in that table's order (one pass over the few
    attributes the resource sets, not over the table)."""
    order = _SPEC_ORDER.get(resource.type, {})
    fields = _SPEC_FIELD.get(resource.type, {})
    written = sorted((order[attr], attr) for attr in resource.where if attr in order)
    return {fields[attr]: resource.where[attr] for _, attr in written}


def _entry(attrs: Mapping[str, Any], unknown: Callable[[str], None]) -> dict[str, Any]:
    """A ``jetstream_kv_entry``: the provider puts ``value`` as the key's bytes."""
    for attr in attrs:
        if attr not in ("id", "bucket", "key", "value", "revision"):
            unknown(attr)
    return {"bucket": attrs.get("bucket"), "key": attrs.get("key"), "value": attrs.get("value", "")}


_MAPPERS = {
    "jetstream_stream": _stream,
    "jetstream_consumer": _consumer,
    "jetstream_kv_bucket": _bucket,
    "jetstream_obj_bucket": _bucket,
    "jetstream_kv_entry": _entry,
}


def documents(
    resources: list[Resource], warnings: list[Problem], *, with_defaults: bool
) -> list[Document]:
    """Spec documents (wire values, located at the Terraform attributes they came from).

    ``with_defaults``: fill the provider's schema defaults first (``.tf`` files; a state
    already holds them)."""
    out = []
    for resource in resources:
        if resource.type in NOT_IMPORTED:
            message = (
                f"{resource.type}.{resource.label} is not imported: {NOT_IMPORTED[resource.type]}"
            )
            warnings.append(Problem(resource.source, "", message, warning=True))
            continue
        mapper = _MAPPERS.get(resource.type)
        if mapper is None:
            message = f"{resource.type}.{resource.label}: unknown resource type, not imported"
            warnings.append(Problem(resource.source, "", message, warning=True))
            continue
        attrs = (
            {**DEFAULTS.get(resource.type, {}), **resource.attrs}
            if with_defaults
            else resource.attrs
        )

        def unknown(attr: str, resource: Resource = resource) -> None:
            message = f"{resource.type}.{resource.label}.{attr} has no mapping: not imported"
            warnings.append(Problem(resource.at(attr), attr, message, warning=True))

        body: dict[str, Any] = {"kind": KINDS[resource.type], **mapper(attrs, unknown)}
        if resource.type == "jetstream_consumer":
            stream_id = str(attrs.get("stream_id") or "")
            body["stream"] = stream_id.removeprefix(STREAM_ID_PREFIX)
        locations = _spec_locations(resource)
        out.append(Document(body=body, source=resource.source, locations=locations))
    return out


_SOURCE_BLOCK: Shape = {"external": [{}], "subject_transform": [{}], "consumer": [{}]}
#: What the mappings read as blocks (lists of objects), lists and numbers.
SHAPES: Mapping[str, Shape] = {
    "jetstream_stream": {
        "mirror": [_SOURCE_BLOCK],
        "source": [_SOURCE_BLOCK],
        "subject_transform": [{}],
        "placement_tags": [None],
    },
    "jetstream_consumer": {"backoff": [None], "filter_subjects": [None], "sample_freq": int},
    "jetstream_kv_bucket": {"placement_tags": [None]},
    "jetstream_obj_bucket": {"placement_tags": [None]},
}


def well_shaped(resources: list[Resource], problems: list[Problem]) -> list[Resource]:
    """The resources whose blocks, lists and numbers are where the mapping reads them;
    each misplaced one is a problem at its attribute's line."""
    kept = []
    for resource in resources:
        wrong = misshapen(resource.attrs, SHAPES.get(resource.type), "")
        for path, message in wrong:
            where = resource.at(path.split(".")[0])
            problems.append(Problem(where, path, f"{resource.type}.{resource.label}: {message}"))
        if not wrong:
            kept.append(resource)
    return kept


def read(paths: list[Path], *, strict: bool = False) -> ImportResult:
    """The specs of ``terraform.tfstate`` files and ``.tf`` files or folders, validated;
    raises SpecError listing every problem (an expression not resolved, say)."""
    documents, warnings = load(paths)
    return validated(documents, warnings, strict=strict)


def load(paths: list[Path]) -> tuple[list[Document], list[Problem]]:
    """Spec documents from ``terraform.tfstate`` files and ``.tf`` files or folders;
    (documents, warnings). Raises SpecError listing every expression not resolved."""
    problems: list[Problem] = []
    warnings: list[Problem] = []
    docs: list[Document] = []
    modules: dict[Path, list[Path]] = {}  # the .tf files of each folder: one module
    for path in _files(paths, problems):
        if path.suffix == ".tf":
            modules.setdefault(path.parent.resolve(), []).append(path)
        else:
            state = well_shaped(read_state(path, problems), problems)
            docs += documents(state, warnings, with_defaults=False)
    for files in modules.values():
        resources = well_shaped(read_module(files, problems, warnings), problems)
        docs += documents(resources, warnings, with_defaults=True)
    if problems:
        raise SpecError(problems)
    return docs, warnings


def _is_override(path: Path) -> bool:
    return path.name in ("override.tf", "override.tf.json") or path.name.endswith(
        ("_override.tf", "_override.tf.json")
    )


def _files(paths: list[Path], problems: list[Problem]) -> list[Path]:
    """The ``.tf`` files of each folder, its state, and the files given. A folder's
    ``.tf.json`` files (the same module, in JSON) and override files (``override.tf``,
    ``*_override.tf``: merged into other blocks) are not read: a problem each, rather
    than a module imported without them."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            tf = sorted(path.glob("*.tf"))
            found += [f for f in tf if not _is_override(f)]
            for skipped in filter(_is_override, tf):
                message = (
                    "an override file (Terraform merges it into the blocks it names) is not "
                    "read: merge it by hand, or import terraform.tfstate"
                )
                problems.append(Problem(Location(str(skipped), 1), "", message))
            for skipped in sorted(path.glob("*.tf.json")):
                message = (
                    "Terraform's JSON syntax is not read (its resources would be missing "
                    "from the import): write it as .tf, or import terraform.tfstate"
                )
                problems.append(Problem(Location(str(skipped), 1), "", message))
            state = path / "terraform.tfstate"
            if state.exists():
                found.append(state)
        else:
            found.append(path)
    once = {p.resolve(): p for p in reversed(found)}  # a file named twice (dir and dir/x.tf)
    return [p for p in found if once[p.resolve()] is p]
