"""``JetStreamSpecs``: a GitOps spec folder under Pulumi, one resource per document.

The folder is loaded and validated by the engine (the same checks as ``reconcile
validate``, including the cross-resource ones) when the program runs, so an invalid
folder fails ``pulumi preview`` with ``FILE:LINE`` messages. Streams declared
``external: true`` are managed elsewhere and get no resource. A consumer depends on the
resource of its stream when the folder declares it, so Pulumi creates the stream first
and deletes it last.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi

from pulumi_provider.resources import RESOURCE_CLASSES, JetStreamResource
from reconciler.errors import Location
from reconciler.loader import load_documents
from reconciler.spec import Spec
from reconciler.validate import validate_documents

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
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, None, opts)
        documents = load_documents([path])
        bodies: dict[Location, dict[str, Any]] = {d.source: d.body for d in documents}
        specs = [s for s in validate_documents(documents) if not s.external]
        self.resources = {}
        streams: dict[str, JetStreamResource] = {}
        for spec in sorted(specs, key=lambda s: s.kind == "Consumer"):
            depends = [streams[spec.stream]] if spec.stream in streams else []
            child = RESOURCE_CLASSES[spec.kind](
                f"{name}/{resource_key(spec)}",
                resource_spec(spec, bodies[spec.source]),
                connection=connection,
                allow_destroy=allow_destroy,
                opts=pulumi.ResourceOptions(parent=self, depends_on=depends),
            )
            self.resources[resource_key(spec)] = child
            if spec.kind != "Consumer":
                streams[spec.stream_name] = child
        self.register_outputs({"ids": {key: r.id for key, r in self.resources.items()}})


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
