"""The GitOps agent behind ``reconcile watch`` (docs/agent.md): a front door like the CLI.

It plans the specs (the paths given, or a git branch's head commit) against a server
again and again: at least every interval, within a second of an advisory naming a
resource, as soon as a new commit is seen. In heal mode it applies what is safe
(:mod:`reconciler.planning.heal`) under the apply lock; it says who changed what (the
server's API audit advisories) in its log, ``/status`` and metrics.

Modules: :mod:`.loop` (the agent), :mod:`.advisories` (what an advisory names),
:mod:`.status` (each resource's state), :mod:`.source` (paths or git), :mod:`.metrics`,
:mod:`.http`, :mod:`.logs`. The engine never imports this package.
"""
