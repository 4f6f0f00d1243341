"""NATS JetStream with `pulumi up`: a GitOps spec folder plus resources declared in code.

The server comes from the stack config (`pulumi config set jetstream:servers nats://...`)
or NATS_URL; a resource may also pass `connection={...}` (a secret input).
"""

from pathlib import Path

import pulumi

from pulumi_provider import Consumer, JetStreamSpecs, KeyValue, ObjectStore, Stream

HERE = Path(__file__).resolve().parent
config = pulumi.Config()

# 1. A spec folder, unchanged: one resource per document, consumers after their stream.
#    Validated like `reconcile validate` (errors name FILE:LINE). The folder next to this
#    file travels with a copy of the program; `pulumi config set specs ./my-specs` points
#    it at your own folder (relative to the program).
shop = JetStreamSpecs("shop", path=HERE / (config.get("specs") or "specs"))

# 2. The same kinds from code: the inputs are the spec fields, same names, same units.
events = Stream(
    "EVENTS",
    subjects=["EVENTS.>"],
    max_age="3d",
    max_bytes="256MiB",
    storage="file",
    # Deleting (or replacing) a stream that holds messages needs this opt-in.
    allow_destroy=False,
)
audit = Consumer(
    "AUDIT",
    stream="EVENTS",
    ack_policy="explicit",
    ack_wait="30s",
    max_deliver=5,
    filter_subject="EVENTS.audit",
    opts=pulumi.ResourceOptions(depends_on=[events]),
)
settings = KeyValue("settings", history=5, ttl="30d")
assets = ObjectStore("assets", max_bytes="1GiB", description="Build artefacts")

pulumi.export("events_live_max_age", events.live_config.apply(lambda c: c.get("max_age")))
pulumi.export("settings_bucket", settings.bucket)
pulumi.export("shop_resources", sorted(shop.resources))
