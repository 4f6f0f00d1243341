"""``JetStreamSpecs``: a GitOps spec folder under Pulumi, one resource per document.

The folder is loaded and validated by the engine (the same checks as ``reconcile
validate``, including the cross-resource ones) when the program runs, so an invalid
folder fails ``pulumi preview`` with ``FILE:LINE`` messages. Streams declared
``external: true`` are managed elsewhere and get no resource. A consumer depends on the
resource of its stream when the folder declares it, so Pulumi creates the stream first
and deletes it last, and is replaced with it (the server deletes a stream's consumers
with the stream).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pulumi

from pulumi_provider.resources import RESOURCE_CLASSES, JetStreamResource
from reconciler.errors import Problem, SpecError
from reconciler.locations import Location
from reconciler.specs.loader import load_documents
from reconciler.specs.spec import Spec
from reconciler.specs.validate import validate_documents

COMPONENT_TYPE = "jetstream:index:JetStreamSpecs"


class JetStreamSpecs(pulumi.ComponentResource):
    """Every document of a spec file or folder as a child resource.

    ``resources`` maps ``Kind/name`` (``Consumer/STREAM/name`` for consumers) to the child.
    """

    resources: dict[str, JetStreamResource]

    def __init__(
        self,
        name: str,
        path: str | Path,
        connection: pulumi.Input[Mapping[str, Any]] | None = None,
        opts: pulumi.ResourceOptions | None = None,
        *,
        allow_destroy: bool | None = None,
        policy: Sequence[str] = (),
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, None, opts)
        documents = load_documents([path])
        bodies: dict[Location, dict[str, Any]] = {d.source: d.body for d in documents}
        specs = [s for s in validate_documents(documents) if not s.external]
        if entries := [s for s in specs if s.kind == "KeyValueEntry"]:
            raise SpecError(
                [
                    Problem(
                        s.source,
                        "kind",
                        "KeyValueEntry is not managed through Pulumi: "
                        "apply it with `reconcile apply`",
                    )
                    for s in entries
                ]
            )
        self.resources = {}
        streams: dict[str, JetStreamResource] = {}
        for spec in sorted(specs, key=lambda s: s.kind == "Consumer"):
            stream = streams.get(spec.stream or "")
            child = RESOURCE_CLASSES[spec.kind](
                f"{name}/{resource_key(spec)}",
                resource_spec(spec, bodies[spec.source]),
                connection=connection,
                allow_destroy=allow_destroy,
                policy=policy,  # docs/policy.md: every child keeps the same rules
                opts=self._child_options(stream),
            )
            self.resources[resource_key(spec)] = child
            if spec.kind != "Consumer":
                streams[spec.stream_name] = child
        self.register_outputs({"ids": {key: r.id for key, r in self.resources.items()}})

    def _child_options(self, stream: pulumi.Resource | None) -> pulumi.ResourceOptions:
        """A child of the component; a consumer also follows its stream's resource."""
        if stream is None:
            return pulumi.ResourceOptions(parent=self)
        follow = [stream]
        return pulumi.ResourceOptions(
            parent=self,
            depends_on=follow,
            replace_with=follow if replace_with_supported() else None,
        )


def replace_with_supported() -> bool:
    """Whether the engine honours ``replace_with`` (Pulumi CLI 3.19x and newer).

    A replaced stream takes its consumers with it on the server, so they must be replaced
    with it. Older engines reject the option; there, ``pulumi refresh`` finds the consumers
    gone and the next ``pulumi up`` re-creates them.
    """
    try:
        from pulumi.runtime.proto import resource_pb2
        from pulumi.runtime.settings import monitor_supports_feature

        return bool(monitor_supports_feature(resource_pb2.RESOURCE_MONITOR_FEATURE_REPLACE_WITH))
    except (ImportError, AttributeError):
        return False


def resource_key(spec: Spec) -> str:
    """``Stream/ORDERS``, ``Consumer/ORDERS/NEW``, ``KeyValue/config``."""
    middle = f"{spec.stream}/" if spec.kind == "Consumer" else ""
    return f"{spec.kind}/{middle}{spec.name}"


def resource_spec(spec: Spec, body: Mapping[str, Any]) -> dict[str, Any]:
    """The document as written (human units kept), with its identity made explicit."""
    inputs = {key: value for key, value in body.items() if key != "external"}
    inputs.update(kind=spec.kind, name=spec.name)
    if spec.stream is not None:
        inputs["stream"] = spec.stream
    return inputs
