"""The CLI flags the engine's messages name, as the Action inputs that set them.

The engine speaks the CLI's words ("Re-run with --allow-replace", "deleted with
--prune", "give --server URL"); a workflow author sets Action inputs, not flags. Every
line the Action shows (job log, annotations, step summary, PR comment, the ``summary``
output) passes through :func:`as_inputs`, which names the input instead: "Re-run with
input allow-replace: true". The replacement is plain words (no backtick, no markup), so
it stays inert inside a Markdown code span or an escaped table cell. A flag no input
sets is named where an Action user sets it instead: a server setting as a project
environment's field (``input environment:`` reads it, docs/environments.md), a
take-over as the CLI command that does it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: Each CLI flag an engine message may name, and the Action input that sets it.
FLAG_INPUTS: Mapping[str, str] = {
    "--allow-replace": "input allow-replace: true",
    "--allow-data-loss": "input allow-data-loss: true",
    "--prune": "input prune: true",
    "--migrate": "input migrate: true",
    "--migration": "input migration:",
    "--policy": "input policy:",
    "--server": "input server:",
    "--creds": "input creds:",
    "--context": "input context:",
    "--env": "input environment:",
    "--project": "input project:",
    "--yes": "input mode: apply",
    "--monitor": "a project environment's monitor:",
    "--system-creds": "system_creds:",
    "--system-context": "system_context:",
    "--user": "a project environment's user:",
    "--password": "password:",
    "--token": "token:",
    "--nkey": "a project environment's nkey:",
    "--tls-ca": "a project environment's tls: ca",
    "--tls-cert": "a project environment's tls: cert",
    "--tls-key": "key",
    "--take-over": "reconcile apply --take-over",
    "--lock-timeout": "reconcile apply --lock-timeout",
}
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*(?![\w-])")


def as_inputs(text: str) -> str:
    """``text`` with every flag of :data:`FLAG_INPUTS` named as its Action input."""
    if "--" not in text:
        return text
    return _FLAG.sub(lambda match: FLAG_INPUTS.get(match.group(0), match.group(0)), text)
