"""``JetStreamSpecs``: a GitOps spec folder under Pulumi, one resource per document.

The folder is loaded and validated by the engine (the same checks as ``reconcile
validate``, including the cross-resource ones) when the program runs, so an invalid
folder fails ``pulumi preview`` with ``FILE:LINE`` messages. Streams declared
``external: true`` are managed elsewhere and get no resource. A consumer depends on the
resource of its stream when the folder declares it, so Pulumi creates the stream first
and deletes it last, and is replaced with it (the server deletes a stream's consumers
with the stream).

With ``project`` (a ``reconcile.yaml``), the component reads what the CLI reads for the
same project, through the engine's own targets: the project's ``policies:``, and with
``environment`` that environment's spec paths, lifecycle (merged into each resource's)
and name (the policies' ``resource.environment``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pulumi

from pulumi_provider.operations import Environment
from pulumi_provider.resources import RESOURCE_CLASSES, JetStreamResource
from reconciler.errors import Problem, ReconcileError, SpecError
from reconciler.execution import stages
from reconciler.jetstream import ConnectionOptions
from reconciler.locations import Location
from reconciler.specs.loader import load_documents
from reconciler.specs.project import load_project
from reconciler.specs.spec import DEFAULT_OWNER, Spec
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
        path: str | Path | None = None,
        connection: pulumi.Input[Mapping[str, Any]] | None = None,
        opts: pulumi.ResourceOptions | None = None,
        *,
        allow_destroy: bool | None = None,
        policy: Sequence[str] = (),
        project: str | Path | None = None,
        environment: str | None = None,
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, None, opts)
        target = project_target(path, project, environment)
        # the project's policies, then policy=: a file named by both is read once (--policy)
        named = [Path(p).resolve() for p in [*target.policies, *map(Path, policy)]]
        policies = [str(p) for p in dict.fromkeys(named)]
        place = Environment(target.env, target.lifecycle)
        documents = load_documents(list(target.paths))
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
                policy=policies,  # docs/policy.md: every child keeps the same rules
                opts=self._child_options(stream),
                project_environment=place,  # its lifecycle merged into each child's
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


def project_target(
    path: str | Path | None, project: str | Path | None, environment: str | None
) -> stages.Target:
    """What the component reads, as the CLI reads it (the engine's targets): ``path``
    alone; ``path`` with ``project`` (``--project FILE PATHS``: the project's
    ``policies:``); or the ``environment`` of ``project`` (``--env``: its spec paths, the
    project's policies, the environment's lifecycle and name). The connection stays the
    component's (``connection``, the stack config); the project's owner is not used (the
    provider's resources are the default owner's)."""
    nowhere = ConnectionOptions()
    if project is None:
        if environment is not None:
            raise ReconcileError(f"environment {environment!r} needs a project file (project=)")
        if path is None:
            raise ReconcileError("give the spec folder (path=) or a project environment")
        return stages.Target((Path(path),), nowhere, DEFAULT_OWNER)
    read = load_project(project)
    if environment is None:
        if path is None:
            raise ReconcileError("give the spec folder (path=) or the environment= to read")
        return stages.paths_target(read, (Path(path),), nowhere, DEFAULT_OWNER)
    if path is not None:
        raise ReconcileError("give either the spec folder (path=) or environment=, not both")
    target = stages.environment_scope(read, environment, nowhere, DEFAULT_OWNER)
    if target.overlays:
        listed = ", ".join(str(p) for p in target.overlays)
        raise ReconcileError(
            f"environment {environment!r} has overlays ({listed}): JetStreamSpecs does not "
            "merge overlays; plan that environment with `reconcile plan --env`"
        )
    return target


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
