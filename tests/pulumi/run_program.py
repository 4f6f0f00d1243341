"""Run a Pulumi program as ``pulumi up`` would, on whatever Python runs this script.

``python run_program.py PROGRAM_DIR SERVER_URL`` runs the program (its ``__main__.py``,
from its own folder) under Pulumi's mock monitor; every dynamic resource it registers is
sent, with the ``__provider`` the program serialised, to a real provider host started
from the same Python (``-m pulumi.dynamic``): Check, then Create, in registration order,
as the engine does for a new stack. Stack config reaches the program through
``PULUMI_CONFIG`` and the provider host through Configure, as the engine passes it.
Prints one JSON line: the created resources (type, name, id) and the stack outputs.

A test runs it inside a fresh virtual environment made by the documented install steps,
so the provider, pulumi and their dependencies are the ones a user would get.
"""

from __future__ import annotations

import asyncio
import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime.mocks import MockCallArgs, MockResourceArgs, Mocks
from pulumi_host import ProviderHost

DYNAMIC = "pulumi-python:dynamic"


class HostMocks(Mocks):
    """Mocks whose resources are created for real by the provider host."""

    def __init__(self, host: ProviderHost) -> None:
        self.host = host
        self.created: list[dict[str, str]] = []

    def new_resource(self, args: MockResourceArgs) -> tuple[str, dict[str, Any]]:
        if not args.typ.startswith(DYNAMIC):
            return f"{args.name}-component", {}
        inputs = dict(args.inputs)
        provider = inputs.pop("__provider")
        # Pulumi always stores the provider as a secret; the engine unwraps it for the host
        self.host.provider = provider["value"] if isinstance(provider, dict) else provider
        checked, failures = self.host.check(inputs)
        if failures:
            raise RuntimeError(f"{args.name}: check failed: {failures}")
        id_, outputs = self.host.create(checked)
        self.created.append({"type": args.typ, "name": args.name, "id": id_})
        return id_, outputs

    def call(self, args: MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None


def main(program: Path, server: str) -> None:
    os.environ["PULUMI_CONFIG"] = json.dumps({"jetstream:servers": server})
    os.chdir(program)
    host = ProviderHost()
    try:
        host.configure({"jetstream:servers": server})
        mocks = HostMocks(host)
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        pulumi.runtime.set_mocks(mocks, project="jetstream-example", stack="dev", preview=False)
        outputs: dict[str, Any] = {}

        @pulumi.runtime.test
        def run() -> pulumi.Output[Any]:
            namespace = runpy.run_path(str(program / "__main__.py"), run_name="__main__")
            shop = namespace["shop"]
            names = pulumi.Output.all(*(r.id for r in shop.resources.values()))
            return pulumi.Output.all(namespace["events"].id, namespace["assets"].id, names).apply(
                lambda values: outputs.update(ids=values)
            )

        run()
        print(json.dumps({"created": mocks.created, "outputs": outputs}))
    finally:
        host.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve(), sys.argv[2])
