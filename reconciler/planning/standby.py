"""Standby pairs as one environment plans them (docs/dr.md).

A stream declaring ``standby: {primary: east, environment: west}`` is, in ``west``, a
mirror of east's: :func:`for_environment` turns its spec into the mirror's (same name,
source lines and lifecycle; ``model.standby.mirror_config``) and leaves its consumers
out of that environment's plan (``reconcile failover`` creates them, from the positions
the primary's consumers had acknowledged). Everything else plans as declared, so the
mirror is a resource like any other: owner marker, lifecycle, policy, the apply lock,
saved plans.

:func:`pairs` lists the pairs a failover from one environment to another covers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from reconciler.errors import Problem, SpecError
from reconciler.locations import Location
from reconciler.model.standby import (
    is_fenced,
    is_the_mirror,
    mirror_config,
    mirrors_the_origin,
    takes_writes,
)
from reconciler.planning.steps import Create, Migrate, Plan, Replace, Step, Update
from reconciler.specs.spec import Spec
from reconciler.specs.standby import Standby
from reconciler.specs.subjects import subjects_overlap

__all__ = [
    "Pair",
    "StandbyView",
    "failbacks",
    "for_environment",
    "guarded",
    "made_primaries",
    "origin_api",
    "pairs",
]


#: How the reason of every step these rules prevent starts (the verdict's headline tells
#: them from lifecycle's preventions by it).
PREVENTED = "prevented by the failover rules: "


@dataclass(frozen=True)
class StandbyView:
    """One environment's specs with its standby streams made mirrors."""

    specs: list[Spec]
    #: Consumers of standby streams: declared, created only by a failover.
    deferred: tuple[Spec, ...] = ()


@dataclass(frozen=True)
class Pair:
    """A stream with its spec, declared standby and the consumers the standby gets."""

    stream: Spec
    standby: Standby
    consumers: tuple[Spec, ...]

    @property
    def name(self) -> str:
        return self.stream.name


def origin_api(standby: Standby, domains: Mapping[str, str | None], where: Location) -> str:
    """The primary's JetStream API prefix as the standby reaches it: ``api`` as declared,
    else ``$JS.<primary's domain>.API``."""
    if standby.api:
        return standby.api
    domain = domains.get(standby.primary)
    if not domain:
        message = (
            f"environment {standby.primary!r} sets no domain: name the primary's API "
            "as the standby reaches it (`api:`, e.g. an account import's prefix)"
        )
        raise SpecError([Problem(where, "standby.api", message)])
    return f"$JS.{domain}.API"


def _check(specs: Sequence[Spec], domains: Mapping[str, str | None]) -> None:
    problems: list[Problem] = []
    for spec in specs:
        standby = spec.standby
        if standby is None:
            continue
        for key in ("primary", "environment"):
            name = getattr(standby, key)
            if name not in domains:
                known = ", ".join(sorted(domains)) or "none: no project file"
                message = f"no environment {name!r} in the project (environments: {known})"
                problems.append(Problem(spec.where(f"standby.{key}"), f"standby.{key}", message))
    if problems:
        raise SpecError(problems)


def for_environment(
    specs: Sequence[Spec], environment: str | None, domains: Mapping[str, str | None]
) -> StandbyView:
    """``specs`` as ``environment`` plans them (``domains``: every environment of the
    project and its JetStream domain). Without an environment (spec PATHS, no
    ``--env``) every stream plans as declared: the primary's view."""
    if environment is None or not any(spec.standby is not None for spec in specs):
        return StandbyView(list(specs))
    _check(specs, domains)
    mirrored = {
        spec.name: spec
        for spec in specs
        if spec.standby is not None and spec.standby.environment == environment
    }
    if not mirrored:
        return StandbyView(list(specs))
    planned: list[Spec] = []
    deferred: list[Spec] = []
    for spec in specs:
        if spec.kind == "Consumer" and spec.stream in mirrored:
            deferred.append(spec)
        elif spec.kind == "Stream" and spec.name in mirrored:
            planned.append(_as_mirror(spec, domains))
        else:
            planned.append(spec)
    return StandbyView(planned, tuple(deferred))


def _as_mirror(spec: Spec, domains: Mapping[str, str | None]) -> Spec:
    standby = spec.standby
    assert standby is not None
    api = origin_api(standby, domains, spec.where("standby"))
    config = mirror_config(spec.config, api=api, deliver=standby.deliver)
    written = {k: v for k, v in spec.written.items() if k.split(".")[0] in config}
    subjects = tuple(str(s) for s in spec.config.get("subjects") or ())
    return Spec.restored(
        {
            **{name: getattr(spec, name) for name in _FIELDS},
            "config": config,
            "written": written,
            "standby": replace(standby, subjects=subjects),
        }
    )


#: The spec fields a mirror keeps from its origin's spec as they are.
_FIELDS = (
    "kind",
    "name",
    "source",
    "stream",
    "external",
    "locations",
    "value_file",
    "lifecycle",
    "standby",
)


def pairs(
    specs: Sequence[Spec], *, primary: str, standby: str, streams: Sequence[str] = ()
) -> list[Pair]:
    """The pairs whose writes go to ``primary`` and whose mirror is in ``standby``
    (only ``streams`` when named; a named stream that is no such pair is an error)."""
    found: list[Pair] = []
    for spec in specs:
        declared = spec.standby
        if spec.kind != "Stream" or declared is None:
            continue
        if declared.primary != primary or declared.environment != standby:
            continue
        if streams and spec.name not in streams:
            continue
        consumers = tuple(s for s in specs if s.kind == "Consumer" and s.stream == spec.name)
        found.append(Pair(spec, declared, consumers))
    missing = sorted(set(streams) - {pair.name for pair in found})
    if missing:
        raise SpecError(
            [
                Problem(
                    None,
                    "",
                    f"stream {name!r} declares no standby with primary {primary!r} "
                    f"and environment {standby!r}",
                )
                for name in missing
            ]
        )
    return found


def failbacks(the_plan: Plan, specs: Sequence[Spec], environment: str | None) -> dict[str, str]:
    """The failbacks in ``the_plan``: stream name -> the environment it mirrors again.
    A failback replaces (or migrates) this environment's fenced stream, the old origin
    of a failover, by the mirror of the primary the specs name now: a full copy. What
    the old origin holds that the primary lacks (writes a failover without the flag
    never waits for, or written there since) is read by the caller and passed to
    :func:`guarded` as ``losses``."""
    found = {}
    for step, standby in _paired_steps(the_plan, specs):
        live = getattr(step, "live", None)
        if (
            standby.environment == environment
            and isinstance(step, Replace | Migrate)
            and isinstance(live, Mapping)
            and is_fenced(live)
        ):
            found[step.name] = standby.primary
    return found


def _paired_steps(the_plan: Plan, specs: Sequence[Spec]) -> Iterator[tuple[Step, Standby]]:
    """The steps of ``the_plan`` on streams whose spec declares a standby (not prevented
    already), with that standby."""
    declared = {s.name: s.standby for s in specs if s.kind == "Stream" and s.standby is not None}
    for step in the_plan.changes:
        standby = declared.get(step.name)
        if standby is not None and step.kind == "Stream" and not step.prevented:
            yield step, standby


def made_primaries(
    the_plan: Plan, specs: Sequence[Spec], environment: str | None
) -> dict[str, str]:
    """The streams ``the_plan`` makes take writes (:func:`_takes_writes`) in the
    environment their spec calls the primary: stream -> the standby environment. After a
    failover the standby's takes the writes: made again here (the origin lost, then
    applied or restored), or a failback's fresh mirror given its subjects (the role swap
    reverted), both would. The caller reads the standby's stream and passes
    :func:`guarded` why it may not be made (``taken``)."""
    if environment is None:
        return {}
    return {
        step.name: standby.environment
        for step, standby in _paired_steps(the_plan, specs)
        if standby.primary == environment and _takes_writes(step)
    }


def _takes_writes(step: Step) -> bool:
    """Whether ``step`` makes a stream that takes writes where none did: a create or
    replace with subjects of its own, or an update giving a mirror its subjects (from
    nats-server 2.12 an update dropping ``mirror`` promotes it)."""
    config = getattr(step, "config", None)
    if not isinstance(config, Mapping) or not isinstance(step, _OVER_LIVE):
        return False
    if not config.get("subjects") or config.get("mirror") or is_fenced(config):
        return False
    if isinstance(step, Create | Replace):
        return True
    live = getattr(step, "live", None)
    return isinstance(live, Mapping) and bool(live.get("mirror"))


def guarded(
    the_plan: Plan,
    specs: Sequence[Spec],
    environment: str | None,
    losses: Mapping[str, str] | None = None,
    consumers: Mapping[str, int] | None = None,
    taken: Mapping[str, str] | None = None,
    unread: Mapping[str, str] | None = None,
) -> Plan:
    """``the_plan`` with the steps that would undo a failover marked ``prevented`` (no
    flag allows them; a heal leaves them to a person):

    - where the specs still call this environment the primary, an update giving a
      fenced stream (``model.standby.is_fenced``) its subjects back: both sides would
      take writes;
    - where they still call it the standby, a replace of a stream that takes writes
      (no mirror, not fenced) by the mirror: it would delete what the promoted stream
      took. A fenced one is the old origin becoming the standby again: a failback
      (:func:`failbacks`), a full copy, allowed with ``--allow-replace`` like any
      replace, unless ``losses`` says why it would delete messages the primary lacks
      (or that the primary could not be read to tell);
    - where they call it the standby, any step making the stream something other than
      the mirror (a restore of the primary's backup there: a plain stream taking writes
      beside the primary's), or the mirror with consumers;
    - where they call it the primary, any step making the stream a mirror (the
      standby's backup restored there), or making it take writes while the standby's
      does (``taken``: :func:`made_primaries`);
    - in either environment of a pair, any step making another stream listen on the
      origin's declared subjects (the mirror has none, a fenced origin its fence
      subject: nothing on the server overlaps it).

    A fenced stream whose spec declares no standby (taken out after a failover), or
    planned without an environment named, is not given its subjects back either: only
    a failback (this environment the spec's standby) changes a fenced stream. Nor is one
    no spec declares (a restore's steps, with ``--server`` none at all): its live config
    alone says it is fenced, and a restore's replace would give it its subjects back.

    ``consumers``: how many consumers each step brings with its stream (a restore's
    snapshot holds them): a standby's mirror takes none, the failover creates them.

    ``taken``: why a stream :func:`made_primaries` lists may not be made with its
    subjects here (its standby's takes the writes); ``unread``: why that was not
    checked (its standby could not be read), said as a reason of the step.

    The live state only ever adds a refusal here, never removes one."""
    streams = {s.name: s for s in specs if s.kind == "Stream"}
    lost = losses or {}
    paired = [
        s
        for s in streams.values()
        if s.standby is not None and environment in (s.standby.environment, s.standby.primary)
    ]
    steps = [
        _beside_a_pair(step, paired)
        or _guarded(
            step,
            streams.get(step.name),
            environment,
            lost.get(step.name, ""),
            (consumers or {}).get(step.name, 0),
            (taken or {}).get(step.name, ""),
        )
        for step in the_plan.changes
    ]
    said = unread or {}
    steps = [
        replace(step, reasons=(*step.reasons, said[step.name]))
        if step.name in said and step.kind == "Stream" and not step.prevented
        else step
        for step in steps
    ]
    return replace(the_plan, changes=tuple(steps))


def _beside_a_pair(step: Step, paired: Sequence[Spec]) -> Step | None:
    """``step`` prevented when it makes another stream listen, in an environment of the
    standby pairs ``paired``, on their origins' declared subjects: it would take writes
    beside the pair's (a backup's stream restored there, of any name). Nothing on the
    server overlaps it: the mirror has no subjects, and a fenced origin has its own
    fence subject. None: it does not."""
    if step.kind != "Stream" or step.prevented or not isinstance(step, _OVER_LIVE):
        return None
    listens = [str(s) for s in step.config.get("subjects") or () if isinstance(s, str)]
    for spec in paired:
        standby = spec.standby
        assert standby is not None
        if spec.name == step.name:
            continue
        declared = standby.subjects or tuple(str(s) for s in spec.config.get("subjects") or ())
        taken = next(
            (mine for mine in declared if any(subjects_overlap(mine, s) for s in listens)),
            None,
        )
        if taken is not None:
            why = (
                f"{PREVENTED}{step.name} would listen on subjects of {spec.name} ({taken!r}), "
                f"whose writes go to one of {standby.primary} and {standby.environment} "
                f"({standby.where}): it would take writes beside them and refuse a "
                "failover's promotion; restore it elsewhere, or change its subjects "
                "(docs/dr.md)"
            )
            return replace(step, prevented=why, reasons=(*step.reasons, why))
    return None


#: The steps that make a live stream something else (a Create over a live stream: a
#: restore's resume of an interrupted restore's leftover, deleted and made again).
_OVER_LIVE = (Create, Update, Replace, Migrate)


def _guarded(
    step: Step,
    spec: Spec | None,
    environment: str | None,
    loss: str,
    consumers: int = 0,
    taken: str = "",
) -> Step:
    if step.kind != "Stream" or step.prevented:
        return step
    if spec is not None and (
        why := _not_the_mirror(step, spec, environment, consumers)
        or _a_mirror(step, spec, environment)
        or _beside_the_standby(spec, environment, taken)
    ):
        return replace(step, prevented=why, reasons=(*step.reasons, why))
    live = getattr(step, "live", None)
    if not isinstance(live, Mapping):
        return step
    standby = spec.standby if spec is not None else None
    if standby is None or spec is None:
        # a restore's steps have no spec (``--server``, or a stream no spec declares):
        # its live config alone says it is fenced; a Create over a live one is a resume
        if not (is_fenced(live) and isinstance(step, _OVER_LIVE)):
            return step
        declare = f"at {spec.source}" if spec is not None else "in its spec"
        why = (
            f"{PREVENTED}{step.name} here is fenced by a failover (its subjects moved "
            f"aside): giving them back would let it and the promoted stream both take "
            f"writes; declare its standby again {declare} and fail back "
            "(docs/dr.md#5-fail-back), or roll the failover back if nothing was promoted"
        )
        return replace(step, prevented=why, reasons=(*step.reasons, why))
    here_standby = environment is not None and standby.environment == environment
    why = ""
    if here_standby and isinstance(step, Replace | Migrate) and takes_writes(live):
        why = (
            f"{PREVENTED}{spec.name} here takes the writes (promoted by a failover?): "
            f"replacing it by the mirror of {standby.primary} would delete them; make "
            f"{environment} the primary (standby.primary: {environment}, environment: "
            f"{standby.primary}) at {standby.where} (docs/dr.md#5-fail-back); the old origin "
            f"of an unplanned failover, back with its subjects, is fenced first: with "
            f"{environment} the primary at {standby.where} again, `reconcile failover "
            f"--from {environment} --to {standby.primary}` once more, then swap the roles; "
            f"one nothing promoted (a plain stream an earlier restore made here, say) is "
            f"deleted by hand once what it holds is in {standby.primary}, and apply then "
            "makes the mirror"
        )
    elif here_standby and isinstance(step, Replace | Migrate) and loss:
        why = (
            f"{PREVENTED}the failback would delete messages {standby.primary} lacks: {loss}; "
            f"copy them to {standby.primary}, or delete {spec.name} here yourself, first "
            "(docs/dr.md#5-fail-back)"
        )
    elif not here_standby and is_fenced(live) and isinstance(step, _OVER_LIVE):
        why = (
            f"{PREVENTED}{spec.name} here is fenced by a failover to "
            f"{standby.environment}: giving it its subjects back would let both take "
            f"writes; make {standby.environment} the primary at {standby.where}, or "
            f"`reconcile failover --from {environment or standby.primary} --to "
            f"{standby.environment} --rollback` if nothing was promoted (docs/dr.md)"
        )
    return replace(step, prevented=why, reasons=(*step.reasons, why)) if why else step


def _not_the_mirror(step: Step, spec: Spec, environment: str | None, consumers: int = 0) -> str:
    """Why a step would make (create, update or replace) ``spec``'s stream here, the
    environment its spec calls the standby, as something other than the mirror: a plain
    stream taking writes on the origin's subjects beside the origin's. Apply's steps
    there are the mirror's (:func:`for_environment`); a restore's are the backup's
    config (east's backup restored into west). '' when the step is the mirror's."""
    standby = spec.standby
    if standby is None or environment is None or standby.environment != environment:
        return ""
    if not isinstance(step, Create | Update | Replace | Migrate):
        return ""
    mirror = step.config.get("mirror")
    if is_the_mirror(step.config, spec.config) and consumers:
        return (
            f"{PREVENTED}the spec declares {spec.name} in {environment} the standby mirror of "
            f"{standby.primary} ({standby.where}): made here with {consumers} consumer(s) of "
            f"the backup's, they would deliver beside {standby.primary}'s and refuse every "
            "failover (which creates them at the promotion); let `reconcile apply --env "
            f"{environment}` make the mirror, which copies it all (docs/dr.md)"
        )
    if is_the_mirror(step.config, spec.config):
        return ""  # the mirror declared (a backup's config could name any stream's)
    # said without the backup's own words: someone else may have written them
    if mirrors_the_origin(mirror, spec.config.get("mirror")):
        made = (
            f"made here as a mirror of {standby.primary}'s, but with what the declared one "
            f"does not carry: a republish of what it copies (each message published again "
            f"beside {standby.primary}'s; onto its own subjects, without end), or a seal, "
            "a deny of deletes or purges, message TTLs, schedules or counters the spec does "
            "not declare (no update undoes one, and the promotion keeps it)"
        )
    elif mirror:
        made = (
            "made here as a mirror of another stream, another domain's or a part of it, it "
            f"would never copy {standby.primary}'s"
        )
    else:
        made = (
            f"made here as a plain stream, it would take writes beside {standby.primary}'s "
            "and never mirror it"
        )
    return (
        f"{PREVENTED}the spec declares {spec.name} in {environment} the standby mirror of "
        f"{standby.primary} ({standby.where}): {made}; write it into "
        f"{standby.primary} (reconcile restore DIR --env {standby.primary}) and let "
        f"`reconcile apply --env {environment}` make the mirror, which copies it all, or "
        f"make {environment} the primary at {standby.where} first (docs/dr.md)"
    )


def _a_mirror(step: Step, spec: Spec, environment: str | None) -> str:
    """Why a step would make ``spec``'s stream a mirror in the environment its spec
    calls the primary, where it takes the writes: a restore of the standby's backup
    there (the mirror's config, reaching the primary's own API) made it a mirror of
    itself, taking no write, while the pair's health said healthy. '' when it would not."""
    standby = spec.standby
    if standby is None or environment is None or standby.primary != environment:
        return ""
    if not isinstance(step, Create | Update | Replace | Migrate) or not step.config.get("mirror"):
        return ""
    return (
        f"{PREVENTED}the spec declares {spec.name} in {environment} the primary, taking the "
        f"writes ({standby.where}): made here as a mirror (a backup of {standby.environment}'s "
        "standby, say), it would take none; restore a backup of "
        f"{environment}'s own stream or, its data lost, fail over: `reconcile "
        f"failover --from {environment} --to {standby.environment} --unplanned` makes "
        f"{standby.environment}'s mirror the stream, which holds it all (docs/dr.md)"
    )


def _beside_the_standby(spec: Spec, environment: str | None, taken: str) -> str:
    """Why ``spec``'s stream may not be made with its subjects here, the primary its spec
    names (``taken``: its standby's takes the writes)."""
    standby = spec.standby
    if not taken or standby is None or standby.primary != environment:
        return ""
    return (
        f"{PREVENTED}{taken}: made here with its subjects, {spec.name} would take writes "
        f"in {environment} too; make {standby.environment} the primary (standby.primary: "
        f"{standby.environment}, environment: {environment}) at {standby.where}, then "
        f"apply {environment} makes the mirror (docs/dr.md#5-fail-back)"
    )
