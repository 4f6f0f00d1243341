"""What the importers of other tools' files share (``terraform``, ``nack``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def renamed(values: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """The fields of ``values`` that are set (not empty, zero or false), under the names
    ``names`` gives them, in ``names``' order: another tool's field names as the API's."""
    return {wire: values[theirs] for theirs, wire in names.items() if values.get(theirs)}
