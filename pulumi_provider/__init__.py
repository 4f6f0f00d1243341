"""Pulumi dynamic provider for NATS JetStream: ``pulumi up`` runs the reconcile engine.

- :class:`JetStreamProvider`: one ``pulumi.dynamic.ResourceProvider`` for every kind.
- :class:`Stream`, :class:`Consumer`, :class:`KeyValue`, :class:`ObjectStore`: resources
  whose inputs are the spec fields plus an optional secret ``connection``.
- :class:`JetStreamSpecs`: a spec folder as one component, one resource per document.

See ``docs/pulumi.md``.
"""

from pulumi_provider.component import JetStreamSpecs
from pulumi_provider.connection import CONFIG_NAMESPACE, CONNECTION_FIELDS, SECRET_FIELDS
from pulumi_provider.provider import JetStreamProvider
from pulumi_provider.resources import (
    Consumer,
    JetStreamResource,
    KeyValue,
    ObjectStore,
    Stream,
)

__all__ = [
    "CONFIG_NAMESPACE",
    "CONNECTION_FIELDS",
    "SECRET_FIELDS",
    "Consumer",
    "JetStreamProvider",
    "JetStreamResource",
    "JetStreamSpecs",
    "KeyValue",
    "ObjectStore",
    "Stream",
]
