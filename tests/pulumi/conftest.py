"""Pulumi tests: the provider-host harness lives next to them (tests/pulumi/pulumi_host.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
