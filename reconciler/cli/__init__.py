"""The ``reconcile`` command line.

Commands live in their own modules and are imported only when invoked, so ``reconcile
--help`` stays fast (no pulumi, pyspark or big rendering imports on the start-up path).
Errors are rendered in exactly one place, :func:`main`.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from reconciler.errors import ExitStatus, ReconcileError, unforeseen

# command name -> (module, attribute, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "validate": ("reconciler.cli.validate_cmd", "validate", "Check spec files; no server."),
    "plan": ("reconciler.cli.plan_cmd", "plan", "Show what apply would change."),
    "apply": ("reconciler.cli.plan_cmd", "apply", "Change the server to match the specs."),
    "drift": ("reconciler.cli.drift_cmd", "drift", "Report where the server differs."),
    "export": ("reconciler.cli.export_cmd", "export", "Write live state as spec files."),
    "envs": ("reconciler.cli.envs_cmd", "envs", "List the project's environments."),
    "import": (
        "reconciler.cli.import_cmd",
        "import_",
        "Turn nats CLI, Terraform or NACK files into specs.",
    ),
    "server": ("reconciler.cli.server_cmd", "server", "Run the embedded nats-server."),
    "snapshot": ("reconciler.cli.snapshot_cmd", "snapshot", "Write live configs as JSONL."),
    "fleet": ("reconciler.cli.fleet_cmd", "fleet", "Fleet-wide drift on Apache Spark."),
    "lock": ("reconciler.cli.lock_cmd", "lock", "Inspect or break the apply lock."),
    "backup": ("reconciler.cli.backup_cmd", "backup", "Snapshot streams' data to a folder."),
    "restore": ("reconciler.cli.backup_cmd", "restore", "Restore a backup folder."),
    "watch": ("reconciler.cli.watch_cmd", "watch", "Keep a server converged (the agent)."),
    "failover": (
        "reconciler.cli.failover_cmd",
        "failover",
        "Standby streams take over their primary's writes.",
    ),
}


#: Two or three examples per command, shown at the end of its --help.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "validate": (
        "reconcile validate specs/",
        "reconcile validate --strict --format json specs/ streams.yaml",
        "reconcile validate specs/ --policy policies/prod.yaml",
    ),
    "plan": (
        "reconcile plan specs/ --server nats://nats:4222",
        "reconcile plan --env prod --prune --format markdown > plan.md   # reconcile.yaml",
        "reconcile plan --all-envs --detailed-exitcode   # exit 2 when something would change",
        "reconcile plan --env prod --out plan.json   # saved: `reconcile apply plan.json`",
        "reconcile plan specs/ --policy policies/starter.yaml   # exit 3 when a deny rule breaks",
    ),
    "apply": (
        "reconcile apply specs/                      # shows the plan, asks for yes",
        "reconcile apply specs/ --server nats://nats:4222 --yes   # CI: no terminal to ask on",
        "reconcile apply --env staging --prune --allow-data-loss -y   # from reconcile.yaml",
        "reconcile apply plan.json --env prod   # exactly the saved plan, or nothing",
    ),
    "drift": (
        "reconcile drift specs/",
        "reconcile drift specs/ --full   # every unmanaged name, not a count per kind",
        "reconcile drift --env prod --format html --out drift.html",
    ),
    "import": (
        "reconcile import --from nats-cli streams/*.json --out specs/",
        "reconcile import --from nats-cli backup/ --out specs/   # a `nats account backup`",
    ),
    "envs": ("reconcile envs", "reconcile envs --project infra/reconcile.yaml --format json"),
    "export": (
        "reconcile export --out specs/",
        "reconcile export --owner team-a --out team-a/",
    ),
    "server": ("reconcile server", "reconcile server --store /tmp/js --port 4222"),
    "snapshot": ("reconcile snapshot --env prod --out snapshots/prod.jsonl",),
    "fleet drift": (
        "reconcile fleet drift --specs fleet/ --snapshots snapshots/ --out report/",
        "reconcile fleet drift ... --spark-master spark://spark:7077",
    ),
    "lock status": ("reconcile lock status", "reconcile lock status --format json"),
    "lock break": ("reconcile lock break", "reconcile lock break --force"),
    "backup": (
        "reconcile backup specs/ --out backups/nightly",
        "reconcile backup --all --out backups/all --server nats://nats:4222",
        "reconcile backup verify backups/nightly",
    ),
    "backup take": (
        "reconcile backup take specs/ --out backups/nightly   # the same as `reconcile backup`",
        "reconcile backup --env prod --stream ORDERS --out backups/orders",
    ),
    "backup verify": ("reconcile backup verify backups/nightly",),
    "restore": (
        "reconcile restore backups/nightly                 # shows the plan, asks for yes",
        "reconcile restore backups/nightly --stream ORDERS --yes",
    ),
    "failover": (
        "reconcile failover --from east --to west --check   # each pair's health, exit 2 if not",
        "reconcile failover --from east --to west           # shows the plan, asks for yes",
        "reconcile failover --from east --to west --unplanned --yes   # east is lost",
    ),
    "watch": (
        "reconcile watch specs/ --server nats://nats:4222              # observe, /metrics",
        "reconcile watch --env prod --mode heal --log-format json --listen 0.0.0.0:9464",
        "reconcile watch specs/ --git https://git.example/infra.git --ref main --mode heal",
        "reconcile watch specs/ --once   # cron: exit 0 in sync, 2 drift, 3 denied, 1 error",
        "reconcile watch --all-envs --mode heal      # every environment of reconcile.yaml",
        "reconcile watch --shard 1/3 --mode heal     # a third of them (RECONCILE_SHARD)",
    ),
}


def _with_examples(command: click.Command, name: str) -> click.Command:
    """The command with its examples as the epilog of its --help (and its sub-commands')."""
    if isinstance(command, click.Group):
        for sub_name, sub in command.commands.items():
            _with_examples(sub, f"{name} {sub_name}")
    examples = EXAMPLES.get(name)
    if examples and not command.epilog:
        command.epilog = "\b\nExamples:\n" + "\n".join(f"  {line}" for line in examples)
    return command


class LazyGroup(click.Group):
    """A group whose sub-commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module = importlib.import_module(entry[0])
        command = getattr(module, entry[1])
        assert isinstance(command, click.Command)
        return _with_examples(command, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # `reconcile --dry-run PATH...` is `reconcile plan PATH...`.
        if args and args[0] == "--dry-run":
            args = ["plan", *args[1:]]
        return super().parse_args(ctx, args)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, envvar="RECONCILE_DEBUG", help="Show tracebacks.")
@click.option("--no-color", is_flag=True, help="No colours (as NO_COLOR=1 does).")
@click.version_option(package_name="jetstream-gitops", prog_name="reconcile")
@click.pass_context
def cli(ctx: click.Context, debug: bool, no_color: bool) -> None:
    """Keep NATS JetStream streams, consumers and buckets in git.

    `reconcile --dry-run PATH...` is the same as `reconcile plan PATH...`.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    if no_color:
        os.environ["NO_COLOR"] = "1"  # read by the console and by rich


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script; the one place errors are rendered."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args or bool(os.environ.get("RECONCILE_DEBUG"))
    try:
        code: Any = cli.main(args=args, prog_name="reconcile", standalone_mode=False)
    except ReconcileError as err:
        if debug:
            raise
        from reconciler.console.terminal import TerminalConsole

        TerminalConsole().show_error(err)
        sys.exit(err.exit_code)  # ERROR; POLICY_DENY for a policy deny (PolicyDenied)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(ExitStatus.INTERRUPTED)
    except click.ClickException as err:
        err.show()  # a usage error is click's 2: an error here, never "changes"
        sys.exit(err.exit_code if err.exit_code != ExitStatus.CHANGES else ExitStatus.ERROR)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(ExitStatus.INTERRUPTED)
    except Exception as err:  # no check foresaw it: said by its type and place, never text
        if debug:
            raise
        click.echo(f"error: {unforeseen(err)} (--debug shows the traceback)", err=True)
        sys.exit(ExitStatus.ERROR)
    sys.exit(code if isinstance(code, int) else ExitStatus.OK)
