"""Run the reliability tests and regenerate RELIABILITY.md from what they proved.

    python bench/reliability_report.py [--json FILE] [--markdown FILE] [-- PYTEST ARGS]

Runs ``pytest tests/reliability`` (slow and cluster tests included) with
``RELIABILITY_FIGURES`` pointing at a scratch file, where the tests append their figures
(faults survived, rounds run, inputs tried, messages checked, ...). Then writes:

- a JSON report (``--json``, default ``bench/out/reliability.json``): every test with its
  outcome and duration, every figure summed per guarantee and in all;
- ``RELIABILITY.md`` (``--markdown``): each guarantee, the tests proving it, their
  outcome and the figures.

Exit status: pytest's. Durations are reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
#: The reliability suite, the end-to-end tests of what a person approves at the prompt, and
#: the NACK importer's refusals.
SUITE = (
    "tests/reliability",
    "tests/e2e/test_confirm_and_server.py",
    "tests/integration/test_import_nack.py",
    "tests/integration/test_front_doors.py",
    "tests/integration/test_backup.py",
    "tests/integration/test_backup_memory.py",
    "tests/integration/test_backup_holes.py",
    "tests/integration/test_overlapped_read.py",
    "tests/integration/test_lifecycle.py",
    "tests/integration/test_lifecycle_holes.py",
    "tests/integration/test_policy.py",
    "tests/integration/test_policy_bypass.py",
    "tests/integration/test_saved_plans.py",
    "tests/integration/test_saved_plan_attacks.py",
    "tests/integration/test_drift_ignore.py",
    "tests/integration/test_capacity.py",
    "tests/integration/test_capacity_attacks.py",
    "tests/integration/test_client_buckets.py",
    "tests/integration/test_import_terraform_refs.py",
    "tests/integration/test_import_nack_accounts.py",
    "tests/integration/test_roundtrip_attacks.py",
    "tests/integration/test_consumer_limits.py",
    "tests/integration/test_interest_filter_loss.py",
    "tests/integration/test_agent.py",
    "tests/integration/test_agent_service.py",
    "tests/integration/test_agent_git.py",
    "tests/integration/test_agent_attacks.py",
    "tests/integration/test_apply_json_lines_interrupt.py",
    "tests/integration/test_drift_ignore_attacks.py",
    "tests/e2e/test_ignore_file_symlink.py",
    "tests/unit/test_reviewer_output_attacks.py",
    "tests/integration/test_backup_attacks.py",
    "tests/integration/test_restore_holes.py",
    "tests/integration/test_restore_rules.py",
    "tests/integration/test_restore_verify.py",
    "tests/integration/test_restore_room.py",
    "tests/integration/test_restore_attacks.py",
    "tests/integration/test_restore_interrupt.py",
    "tests/integration/test_saved_plan_lineage.py",
    "tests/integration/test_saved_plan_doors.py",
    "tests/integration/test_protected_orphans.py",
    "tests/integration/test_capacity_server.py",
    "tests/integration/test_policy_budget.py",
    "tests/integration/test_agent_envs.py",
    "tests/integration/test_dr_failover.py",
    "tests/integration/test_dr_attacks.py",
    "tests/integration/test_stage_attacks.py",
    "tests/pulumi/test_pulumi_attacks.py",
    "tests/pulumi/test_program_mocks.py",
    "tests/integration/test_json_errors.py",
    "tests/unit/test_swapped_paths.py",
    "tests/integration/test_dr_holes.py",
    "tests/integration/test_dr_leftovers.py",
    "tests/integration/test_dr_restores.py",
    "tests/integration/test_restore_live_checks.py",
    "tests/integration/test_agent_envs_attacks.py",
    "tests/unit/test_standby_guard.py",
    "tests/unit/test_unfence_by_hand.py",
    "tests/integration/test_dr_attacks4.py",
    "tests/integration/test_dr_flow5.py",
    "tests/integration/test_new_user6.py",
    "tests/integration/test_agent_envs_attacks6.py",
    "tests/integration/test_agent_flapping.py",
    "tests/integration/test_attacks7.py",
    "tests/integration/test_greeting_attacks.py",
    "tests/integration/test_attacks8.py",
    "tests/integration/test_read_bounds.py",
    "tests/integration/test_attacks9.py",
    "tests/integration/test_attacks10.py",
    "tests/integration/test_attacks11.py",
    "tests/integration/test_attacks12.py",
    "tests/integration/test_attacks13.py",
    "tests/integration/test_saved_plan_hint.py",
    "tests/integration/test_agent_seat_claims.py",
    "tests/integration/test_agent_project_edits.py",
    "tests/integration/test_attacks16.py",
    "tests/integration/test_attacks17.py",
    "tests/integration/test_export_import_overwrite.py",
    "tests/integration/test_attacks18.py",
    "tests/integration/test_attacks18d.py",
    "tests/integration/test_dr_attacks18.py",
    "tests/unit/test_parser_bounds.py",
    "tests/integration/test_kv_scan.py",
    "tests/integration/test_kv_declared.py",
    "tests/integration/test_dr_attacks18b.py",
    "tests/integration/test_attacks19.py",
    "tests/unit/test_promotion.py",
    "tests/integration/test_dr_leftovers19.py",
    "tests/integration/test_attacks19b.py",
    "tests/integration/test_kv_leftovers20.py",
    "tests/integration/test_dr_leftovers20.py",
    "tests/integration/test_attacks20.py",
    "tests/integration/test_restore_differences.py",
)


@dataclass(frozen=True)
class Guarantee:
    title: str
    claim: str
    tests: tuple[str, ...]  # "module.py::test_prefix" (a prefix matches parametrised cases)


GUARANTEES = (
    Guarantee(
        "Applies never interleave",
        "Every `reconcile apply` holds a lease in the KeyValue bucket `RECONCILE_LOCKS` "
        "(key `apply`) while it plans and applies. A second apply waits up to "
        "`--lock-timeout` (60 s) and then fails naming the holder, its host, pid and since "
        "when. Taking an expired lease is a compare-and-swap: of many racers exactly one wins. "
        "`reconcile lock status` shows the holder, `reconcile lock break` removes a stale "
        "lease (`--force` for a live one). The lock is a fence: before each step the lease "
        "is confirmed by a compare-and-set at its revision (unless confirmed in the last "
        "0.5 s of monotonic time, so a pause counts); a run whose lease was lost or taken "
        "over starts no further step and fails saying how far it got (exit 1). A run "
        "paused with SIGSTOP past its lease while a newer apply finished starts nothing "
        "after it resumes (only requests already handed to the connection before the pause "
        "can land: JetStream has no server-side fencing token). Ctrl-C ends a wait for the "
        "lock (exit 130, nothing changed). Plans never lock, nor does an apply or a restore "
        "that can approve nothing (no terminal, no `--yes`).",
        (
            "test_concurrency.py::test_two_concurrent_applies_do_not_interleave",
            "test_concurrency.py::test_apply_gives_up_after_lock_timeout_naming_the_holder",
            "test_concurrency.py::test_an_apply_that_loses_its_lease_stops",
            "test_concurrency.py::test_a_run_paused_past_its_lease",
            "test_concurrency.py::test_ctrl_c_while_waiting",
            "test_lock.py::",
        ),
    ),
    Guarantee(
        "A crashed apply is recovered",
        "After `kill -9` of the reconciler mid-apply, the next apply on the same host sees "
        "that the holder's process is gone and takes the lease over at once (saying so), "
        "then converges; on another host the lease expires by itself (30 s, "
        "`RECONCILE_LOCK_LEASE`, which must be a positive number). `lock status` names the "
        "dead run.",
        ("test_concurrency.py::test_kill_9_of_the_reconciler_mid_apply_then_reapply_converges",),
    ),
    Guarantee(
        "A crashed or frozen server is survived",
        "After `kill -9` of nats-server mid-apply and a restart from its store, apply "
        "converges and no stored message is lost. A server frozen with SIGSTOP mid-request "
        "gives `no answer to ... within Ns` and exit 1, not a hang: the executor starts no "
        "further step once a request timed out or the connection broke.",
        (
            "test_server_faults.py::test_kill_9_of_the_server_mid_apply_then_restart",
            "test_server_faults.py::test_frozen_server",
        ),
    ),
    Guarantee(
        "Clusters: a node down, leaders changing",
        "On a 3-node cluster with R3 streams (and an R3 lock bucket) apply and re-plan work "
        "with a node down (the first URL given), and apply converges after stream leader "
        "step-downs issued while it runs. More replicas than the cluster has (R5 on three "
        "servers) are refused with both numbers before anything is created; an environment's "
        "overlay gives the same specs three replicas on the cluster and one on a single "
        "server, each re-planning empty.",
        ("test_cluster.py::",),
    ),
    Guarantee(
        "No data loss under random change",
        "A model-based run (hypothesis) makes random edits of streams, consumers and KeyValue "
        "buckets against a real server, shrinks included (a tighter max_msgs, "
        "max_msgs_per_subject or max_age on a stream holding messages, retention limits to "
        "interest, a bucket's shorter history or ttl), and applies each without "
        "`--allow-replace` or `--allow-data-loss`: edits that lose nothing converge (re-plan "
        "empty); edits destroying data are refused as a whole, leave the server untouched and "
        "re-plan as exactly that step; every published message stays in its stream.",
        ("test_model.py::",),
    ),
    Guarantee(
        "Lossy updates are destructive",
        "An update the server would accept but that deletes stored messages is planned as "
        "destructive with an estimate of the loss (`loss` in the plan JSON), shown in text "
        "and Markdown, and refused as a whole without `--allow-data-loss` "
        "(`--allow-replace` does not allow it): max_msgs, max_bytes, max_age, "
        "max_msgs_per_subject, retention limits→interest, KeyValue history and ttl (also an "
        "existing bucket declared without its history), ObjectStore ttl. Messages are "
        "published first and counted after the refused and the allowed apply. Pruning or "
        "replacing a consumer loses its delivery state and needs a flag too.",
        ("test_lossy_updates.py::",),
    ),
    Guarantee(
        "Nothing of other owners is touched",
        "Every managed resource names its owner (`--owner`, default `default`; resources "
        "marked before owners existed belong to `default`). `--prune` deletes only the "
        "owner's resources; other owners' appear as `foreign` in plans and drift (not drift, "
        "never orphans) and are never touched; declaring one is refused naming its owner "
        "unless `--take-over`. Messages of the other team's stream are counted after.",
        ("test_owners.py::",),
    ),
    Guarantee(
        "Plans stay right while the server changes",
        "Paged lists are read again when they changed while read, each item is kept once, and "
        "a declared resource the lists did not show is confirmed with INFO: planning while "
        "another client creates and deletes streams (crossing list pages) neither fails nor "
        "plans a create for an existing stream.",
        ("test_stable_reads.py::",),
    ),
    Guarantee(
        "Export writes only where asked and loses nothing",
        "Export file names are injective and reversible (`%XX` escapes: `A+B`, `A_B`, `A:B`, "
        "`A|B` get four files), long names are shortened with a hash, a file of the same "
        "name that export or import did not write (hand-written, a symlink) is refused "
        "before anything is written unless `--overwrite`, and so is one appearing between "
        "that check and the write (never replaced nor followed), files are written by "
        "rename or link so a symlink in the folder is never followed, the count "
        "printed is the files written, write errors are one-line errors, and applying an "
        "export with `--prune` deletes nothing; names differing only in case (`ORDERS`, "
        "`orders`) get files a case-insensitive disk keeps apart. The Action's `plan-file` "
        "is never written through a symlink a pull request holds: one at the path is "
        "replaced, a folder of "
        "the workspace that is one is refused, and nothing outside is written.",
        (
            "test_export_safety.py::",
            "test_attacks10.py::",
            "test_attacks17.py::test_names_differing_only_in_case",
            "test_export_import_overwrite.py::",
        ),
    ),
    Guarantee(
        "Properties of the engine",
        "`diff(x, x)` is empty; a server holding the desired configs plans no change; wire "
        "configs survive the human-units round trip; export then plan is empty on a real "
        "server; the loader and validation raise nothing but `SpecError` on fuzzed YAML, "
        "JSON, text and bytes, nor under coverage-guided fuzzing with atheris (run when "
        "atheris is installed). (Duration and size round trips: `tests/unit/test_units.py`.)",
        ("test_properties.py::", "test_fuzz.py::"),
    ),
    Guarantee(
        "Least privilege and TLS",
        "A user allowed to publish only to `$JS.API.>` and `$KV.RECONCILE_LOCKS.>` and to "
        "subscribe to `_INBOX.>` can plan and apply; with `$JS.API.>` and `_INBOX.>` alone "
        "it can plan and `apply --no-lock`, and a locked apply names the subject it lacks; "
        "a user without the API gets a one-line permission error. TLS with a CA made in the "
        "test works (client certificates too); a wrong CA or a missing client certificate "
        "fails with a clear message. A `tls://` URL or TLS files mean TLS or nothing: a server "
        "without TLS, or a listener stripping its flag, never receives the password.",
        (
            "test_new_user6.py::test_a_tls_url",
            "test_security.py::test_least_privilege",
            "test_security.py::test_api_only",
            "test_security.py::test_user_without_the_api",
            "test_security.py::test_tls",
            "test_security.py::test_client_without",
        ),
    ),
    Guarantee(
        "Secrets never shown",
        "Passwords, tokens (flags, environment and inside URLs), creds (JWT and seed) and "
        "nkey seeds never appear in the output of plan (text, JSON), apply, drift (Markdown, "
        "HTML), export files, lock status or `--debug` runs, on success or failure; nor in "
        "the Action's log, outputs, step summary or sticky PR comment (posted to a loopback "
        "GitHub stand-in; the GitHub token is grepped too). The one place a secret is "
        "printed is the `::add-mask::` command the runner consumes. Random secrets pushed "
        "through every error path of plan, apply, drift, export, snapshot and lock, in every "
        "URL form nats-py accepts (no scheme, token, second URL of a list, bad port, "
        "ws://, unparseable), never show and never end in a traceback; nor a password typed "
        "with a `/` in a URL, nor a creds variable holding the file's text instead of its path; "
        "nor what a listener that is no NATS server sends, nor a forged reply of a shape no "
        "check foresaw (said by its type and place; `--debug` keeps the traceback), nor a "
        "password, token or creds file's user JWT a listener says back, nor a "
        "secret-looking value in a validation error (the Action's log, summary and "
        "annotations, Pulumi's check), nor a Pulumi secret input in the stack's state, "
        "nor a KeyValue value written as a secret once a change drops `secret: true` (plan, "
        "comment, saved plan, drift report), nor what `reconcile import` reads: a value a "
        "Terraform state marks sensitive, the text of an HCL syntax error beside a secret, a "
        "NACK Account's misplaced token or seed, a server URL with credentials.",
        (
            "test_attacks8.py::test_a_listener_saying_the_credentials_back",
            "test_attacks11.py::test_a_listener_saying_the_creds_files_jwt_back",
            "test_attacks11.py::test_a_secret_inputs_value",
            "test_program_mocks.py::test_secret_inputs_are_in_the_state_only_encrypted",
            "test_attacks9.py::test_an_invalid_spec_never_quotes_a_secret",
            "test_attacks9.py::test_a_pulumi_check_never_quotes_a_secret",
            "test_greeting_attacks.py::test_plan_against",
            "test_greeting_attacks.py::test_a_forged_reply",
            "test_new_user6.py::test_a_password_typed_with_a_slash",
            "test_new_user6.py::test_a_project_file_url_with_a_slashed_password",
            "test_agent_envs_attacks6.py::test_a_credentials_variable_holding_the_secret",
            "test_secret_paths.py::",
            "test_security.py::test_passwords",
            "test_security.py::test_creds",
            "test_security.py::test_the_action",
            "test_attacks16.py::test_a_change_dropping_secret_true",
            "test_attacks16.py::test_a_secret_written_before_its_header",
            "test_attacks17.py::test_a_sensitive_value_of_a_terraform_state",
            "test_attacks17.py::test_a_nack_account_s_misplaced_secret",
            "test_attacks17.py::test_a_terraform_syntax_error_beside_a_secret",
            "test_attacks17.py::test_a_nack_account_s_server_url_with_credentials",
            "test_attacks18.py::test_credentials_the_server_input_cannot_hold",
            "test_attacks18d.py::test_the_value_of_a_key_named_like_a_secret",
            "test_attacks18d.py::test_an_entry_is_never_written_into_a_stream",
        ),
    ),
    Guarantee(
        "Large and hostile input",
        "A 50 MiB file (limit 16 MiB), 100,000 documents in a file (limit 50,000), billion "
        "laughs and merge-key bombs, and nesting 100,000 levels deep (YAML flow, block and "
        "JSON) are refused with one `FILE:LINE: message` error, in a fresh process whose peak "
        "RSS is measured; 10,000 documents still load. Integers of 5,000 digits (counts, "
        "durations, sizes; YAML and JSON), lone surrogates, JSON indented with tabs with "
        "escapes and a duplicate key are `FILE:LINE` errors, and a 10 MiB value is quoted "
        "in at most 80 characters.",
        ("test_hostile_input.py::",),
    ),
    Guarantee(
        "Real accounts at full size",
        "1,000 streams with 20 consumers each (21,000 resources) apply from nothing, "
        "re-plan empty, export to 1,000 files whose plan (with --prune) is empty, and drift "
        "clean, all through the CLI on one real server. (Speed: bench/bench_plan_apply.py.)",
        ("test_scale.py::",),
    ),
    Guarantee(
        "A migration loses nothing, even killed",
        "`apply --migrate` changes a field the server cannot update by copying the messages "
        "out to a temporary stream and back. The reconciler killed with SIGKILL at each of "
        "the eleven phase boundaries leaves a migration that `plan` and `drift` show as "
        "interrupted; the next plain `apply` finishes it with every message (subject, "
        "payload, headers, order) and the consumer's ack floor kept, and no temporary "
        "stream left. The same after nats-server is killed -9 during the copy back and "
        "restarted. On a 3-node cluster an R3 stream migrates file → memory with every "
        "message. (Speed: bench/bench_migrate.py.)",
        (
            "test_migrate_faults.py::",
            "test_cluster.py::test_an_r3_stream_migrates_on_the_cluster_with_every_message",
        ),
    ),
    Guarantee(
        "A deleted stream does not come back",
        "nats-server can answer a file stream's delete while its files stay on disk (a "
        "second delete of the name while the first one's files are still being removed); "
        "a create of that name then brings the old messages back. A replace therefore "
        "checks the stream it creates: one holding old messages is deleted and created "
        "again until it comes up empty, or the apply stops naming the stream, which is "
        "left deleted. A migration while the old files linger keeps every message once, "
        "on the newest server (mirrors) and on 2.10 (sources). The tests hold the old "
        "files in place as a slow removal would, and count the messages.",
        ("test_deleted_streams.py::",),
    ),
    Guarantee(
        "Migration records are data, not authority",
        "Anyone who can create a stream can put an `io.jetstream-gitops/migration` record "
        "on `MIGRATING_<stream>`. Before, a plain `apply` finished such a forged migration: "
        "ORDERS went from 100 messages to 0, another owner's PAYMENTS was migrated to "
        "memory with `max_msgs: 1`, an undeclared stream was touched. Now a record is "
        "acted on only for a stream this run declares, bound to the run's owner and to "
        "server-set `created` times, with `--migrate`, and only towards the declared config "
        "or a way out the person chose (`--migration resume|rollback|continue`, the "
        "Action's `migration` input); otherwise the plan shows the step blocked and apply "
        "refuses the whole plan, changing nothing. Because the binding facts can be read "
        "and copied, the executor also refuses to retire a stream its temporary stream "
        "does not copy, or to delete one whose messages it does not hold. A stuck "
        "migration rolls back with every message kept and consumers at their positions: "
        "killed at four points x three choices, on 2.10, 2.12 and the newest server.",
        ("test_migration_trust.py::",),
    ),
    Guarantee(
        "A migration loses, duplicates and strands nothing without saying so",
        "A migration whose target keeps fewer messages is destructive and says how many go: "
        "workqueue -> interest on a stream without consumers deleted 100 of 100 messages "
        "unflagged; now the plan says `deletes all 100` and apply refuses without "
        "`--allow-data-loss` (100 counted after the refusal). Migrating a stream that "
        "others source or mirror copied everything again downstream (AGG 100 -> 200); it "
        "is refused naming AGG and BACKUP, all three still at 100. A workqueue with a live "
        "worker resurrected 28-53 acknowledged jobs; the migration is refused while a "
        "consumer holds jobs, waits for them or delivered within the last second (40 of 40 "
        "refused beside a live worker process), and afterwards exactly the 90 "
        "unacknowledged jobs are kept and drain without repeats. A smaller `max_msg_size` "
        "no longer stalls the copy (10 of 10 kept); a stalling `discard_new_per_subject` "
        "target stays a replace. Subjects overlapping any live stream's are a `FILE:LINE` "
        "error naming it before anything moves (was err 10065 mid-apply).",
        ("test_migration_losses.py::",),
    ),
    Guarantee(
        "Attacked again: a migration's record cannot make it lose data, nor workers undo it",
        "Found by an attacker's review, each now a test. A rollback to an old config edited "
        "in the record to `max_msgs: 1`, `max_age: 100ms` or `interest` cut 300 messages "
        "to 1, 0 or 260, planned lossless; now losses are judged against the messages "
        "held, the plan names them and apply needs `--allow-data-loss`. A record moved on "
        "to `cutover` deleted the 50 messages only the copy held; the server's `created` "
        "times must now come in order. Subject fields edited into a record no longer land "
        "messages under another subject. Malformed record text (nested 50,000 deep, "
        "`1e400`) no longer ends every plan of the account in a traceback. Consumers of a "
        "workqueue or interest stream are paused for the migration (nats-server 2.11+): a "
        "worker started during it left 763 of 2,000 jobs behind and did 7 twice, now 0; "
        "the pause survives kill -9. A stream made to source the stream during the "
        "migration, or subjects taken after the plan, stop it with every message in place "
        "and publishes still accepted (before: 100 -> 200 duplicates; no responders). "
        "A spec declaring the temporary stream of a migration under way is refused at its "
        "line (applied, it took the one stream holding every message its subjects and "
        "record), and while the temporary stream takes the publishes it refuses what the "
        "stream's `discard: new` limits would (a stream of `max_msgs` 3,000 took 21,951 "
        "more and the copy back stalled for good).",
        ("test_attack_migrations.py::", "test_migration_collisions.py::"),
    ),
    Guarantee(
        "What is applied is what was reviewed",
        "After `yes` at the prompt, apply reads the live state again and applies only when "
        "the plan still has the same steps (action, resource, fields, a migration's phase) "
        "and each step destroys the same kind of data; otherwise it changes nothing, names "
        "each changed resource and exits 1. 100 messages published while the question "
        "waited, with a `max_msgs: 10` change planned on the then empty stream: before, "
        "100 -> 10; now all 100 kept. Without a terminal an apply with changes to a server "
        "the user named (`--server`, `NATS_URL`, `--context`, `--env`) needs `--yes` and "
        "writes nothing at all, not even the lock's bucket; the "
        "embedded server needs none; the Action's `mode: apply` is the approval. Ctrl-C at "
        "the question exits 130 with one line (before: exit 1 and `Fatal Python error`). "
        "An empty `--server`/`NATS_URL` or a missing Action `server` is an error, never a "
        "throwaway embedded server; plans and applies name their server without its "
        "credentials (`alice:s3cret@h:4222` and `T0KEN@h` masked in the Action too). "
        "`plan --out` prints the apply that applies the saved file as it was made (its "
        "environment, project file, owner, prune and take-over, given as flags or by their "
        "variables), naming the connection flags without their values; run as printed, it "
        "applies the plan with every message kept.",
        ("test_confirm_and_server.py::", "test_saved_plan_hint.py::", "test_attacks13.py::"),
    ),
    Guarantee(
        "Caches and files cannot smuggle changes in",
        "Every spec-cache entry carries an HMAC-SHA256 and the plan memo's digests are keyed "
        "(BLAKE2b), under `RECONCILE_CACHE_KEY` or a per-user 0600 key file outside the "
        "cache folder. A forged entry (its checksums recomputed, as from a shared CI cache) "
        "sealed a stream and wrote a local file into a KeyValue entry before; now it is a "
        "miss, the plan equals the plan without a cache and the stream keeps its messages. "
        "A forged memo digest no longer hides a change made on the server. A `value_file` "
        "and every path a project file names stay inside the repository, symlinks "
        "resolved: `/etc/passwd`, `../../secret.txt`, a symlink out and `.git/config` are "
        "`FILE:LINE` errors and nothing is applied (before: each was written into KV). "
        "The rule is judged again on the file opened: a spec, project, policy or "
        "`.reconcileignore` file, a `value_file` or a folder on the way swapped for a "
        "symlink out (or into `.git`) after its check is an error at that file, not read; "
        "a policy file of the repository linked out is not read, however it is named.",
        ("test_smuggling.py::", "test_swapped_paths.py::"),
    ),
    Guarantee(
        "Nothing from a spec or the server drives a terminal or a CI log",
        "A stream created on a real server with ESC[2J, OSC 8 links, C1 controls, U+202E, "
        "`\\n::error::`, Markdown links and HTML in its name, description and metadata is "
        "shown escaped in plan and drift text, Markdown, JSON and HTML, and in the Action's "
        "log and step summary. Hostile file names and lock holders cannot start a GitHub "
        "workflow command: a log line that would is wrapped in `::stop-commands::` with a "
        "random token. A forged saved plan's file names reach the Action's annotations "
        "escaped, a hostile lock holder reaches Pulumi's CLI escaped, and export writes a "
        "format character (U+202E, a zero-width space) as its escape, read back the same. "
        "No spec may declare a name or subject holding a control or invisible format "
        "character (a name reading as another in a diff); a live one is planned, pruned and "
        "shown escaped, and export leaves it out, saying so. An error no check foresaw "
        "(a forged reply's text in it) fails the Action's step in one annotation naming "
        "its type and place, never a traceback a runner reads as a command.",
        (
            "test_escaping.py::",
            "test_attacks9.py::test_a_forged_saved_plans_file_names",
            "test_attacks9.py::test_a_pulumi_error_naming_a_hostile_lock_holder",
            "test_attacks9.py::test_an_export_writes_format_characters",
            "test_attacks18.py::test_a_forged_reply_no_check_foresaw",
            "test_dr_attacks18.py::test_the_failover_complete_line_escapes",
        ),
    ),
    Guarantee(
        "Attacked again: caches, the embedded server, the question and logs",
        "Found by an attacker's review of the guarantees above, each now a test: a "
        "`value_file` turned into a symlink after a cached run is a miss and a `FILE:LINE` "
        "error, never read; a cache key under 32 characters is no key (a forged entry under "
        "`RECONCILE_CACHE_KEY=k` sealed ORDERS; now its 105 messages stay); a NUL byte, or "
        "git's folder in any case, in a named path is an error at its line; a project "
        "environment or server URL that names no real server is an error, never a "
        "throwaway embedded server; a forged `.reconcile/embedded.json` naming a real "
        'server never makes it "embedded" (it was applied to unasked, then sent '
        "SIGTERM); after `yes`, a KeyValue value written meanwhile is refused, not "
        "overwritten; a `yes` typed before the question answers nothing (it cut 100 "
        "messages to 10); no output (text, Markdown, JSON, exported YAML, the Action's "
        "log) carries a GitHub workflow command from server or file text, the old `##[` "
        "form included; Markdown mentions nobody; the PR comment holding the plan is never "
        "one a contributor wrote.",
        ("test_attack_review_cache.py::",),
    ),
    Guarantee(
        "Every front door refuses the same destructive change the same way",
        "For the same specs and live state, the CLI, the Action, the Pulumi provider and the "
        "engine API make the same plan, and each refuses an update that would delete stored "
        "messages with the executor's one refusal and identical detail lines, changing "
        "nothing: the 20 messages published are counted after each refusal (Pulumi refused "
        "with words of its own before, and its destroy bypassed the executor). An invalid "
        "spec in any environment stops a multi-environment plan before any server is asked "
        "(the Action planned dev before it loaded prod).",
        ("test_front_doors.py::",),
    ),
    Guarantee(
        "Backups never look complete when they are not, and restore exactly",
        "Snapshot data is written to `.partial` files and renamed only when whole; a "
        "stream's `backup.json` is removed before its snapshot and written after it, and "
        "`manifest.json` is removed first and written last, only when every stream "
        "succeeded: kill -9 of the backup, the server killed mid-snapshot and a receiver "
        "the server gives up on (408) leave nothing that looks complete. A restore gives "
        "back every message (sequence, time, subject, payload, headers) and every "
        "consumer's delivered and ack-floor position on a fresh server, for folders made "
        "by the nats CLI too and on nats-server 2.10 and 2.12; any difference from the "
        "manifest is an error. A truncated or altered snapshot is refused, naming the "
        "file, before anything is sent. An interrupted restore finishes when run again, "
        "without flags: what an interrupted restore left (the "
        "backup's config and consumers, its first message matching the backup's exactly by "
        "SHA-256, nothing later than the backup's last) is deleted and restored, and a "
        "stream of the same name holding other data is refused. Memory streams back up "
        "through a temporary file mirror and restore through one, every message intact. "
        "No credential reaches a manifest, names from a forged manifest cannot "
        "become paths outside the folder, and a 1 GiB backup and restore stay under "
        "41 MiB RSS.",
        ("test_backup_faults.py::", "test_backup.py::", "test_backup_memory.py::"),
    ),
    Guarantee(
        "A backup writes only into its own files, whatever the streams are called",
        "The backup's own names hold a dot, which no stream name can (`manifest.json`, "
        "`specs.d/`, `backup-in-progress.json`): a stream named `specs` keeps its 20 "
        "messages and restores. A backup replaces or removes only the files an earlier "
        "backup of the folder listed as its own: `reconcile backup specs --out .` in a "
        "repository is refused, naming what is there, and not one file changes; a later "
        "backup keeps a README and folders of someone else's and refuses a stranger's file "
        "where it would write; a symbolic link below the folder is not followed, and a "
        "second backup into a folder being written is refused. A full disk (a real 1 MiB "
        "tmpfs) is one line naming the folder and the stream, with no manifest and no "
        "`.partial` file left, and what "
        "the failed backup left is refused by restore. The tool's own lock bucket is never "
        "backed up, so a restore never makes it elsewhere.",
        ("test_backup_holes.py::",),
    ),
    Guarantee(
        "A plan reads while it checks the files, and writes nothing before they are valid",
        "With a server named, `reconcile plan` (drift, `apply --dry-run`) connects and reads "
        "while the spec files are checked in a thread. Only read requests reach the server "
        "before the check ends; an invalid file cancels the read and its `FILE:LINE` error "
        "is what is reported, even beside an unreachable server. With no server named the "
        "files are checked before the embedded server starts. `apply` keeps its order: its "
        "first request takes the apply lock, a write.",
        ("test_overlapped_read.py::",),
    ),
    Guarantee(
        "Importers that a hostile file cannot stop",
        "`reconcile import --from terraform|nack` ends any hostile file in one `FILE:LINE` "
        "error, exit 1, nothing written, never a traceback: 4,300-digit numbers multiplied "
        "(was a traceback), numbers past int64 (literal, computed, `1e999999999`: never "
        "computed), nesting deeper than the parser's stack, expressions over 256 "
        "characters, a `.tf` over the 8 MiB cap (refused unread), a state file nested "
        "100,000 deep, values of the wrong shape, interpolated strings (imported as literal "
        "text before). The work is linear, counted rather than timed: for 4x the resources "
        "the importer runs 4.0x the lines (11.5x for `.tf` files and 15x for state files "
        "before); 30,000 resources are 30,000 one-block parses (8,000 took 38 s and 30,000 "
        "over 300 s before; `python bench/bench_import.py` prints the import against "
        "python-hcl2's bare parse). NACK Accounts deriving one secret variable (`team-a`, "
        "`team.a`) or sharing a name are refused, naming both.",
        (
            "test_hostile_import.py::",
            "test_import_nack.py::test_accounts_whose_names_derive_one_variable",
            "test_import_nack.py::test_two_accounts_of_one_name",
        ),
    ),
    Guarantee(
        "A protected resource survives every flag, every front door and a removed spec",
        "A resource whose spec, environment or server-side record says `prevent_destroy` is "
        "never deleted, replaced, migrated, pruned or restored over, with `--prune "
        "--allow-replace --allow-data-loss --migrate`, through the CLI, the GitHub Action "
        "(its `environment:` input and saved plans included) and Pulumi's destroy, and after "
        "its spec is deleted: apply refuses the whole plan before the first step and names "
        "where the protection was declared. A forged or hand-removed metadata record can only "
        "add protection. Ignored fields never drift and are never reset; observed resources "
        "are never written, and missing ones are not created; an observed environment is not "
        "written at all (no apply lock, no backup's temporary mirror). Every case publishes "
        "messages first and counts them after. Pulumi's delete and preview follow the "
        "lifecycle the resource declares, also once its server-side record was removed.",
        (
            "test_lifecycle.py::",
            "test_backup_memory.py::test_an_observed_environment_never_gets_a_backups",
            "test_attacks9.py::test_a_pulumi_delete",
            "test_attacks9.py::test_a_pulumi_preview",
            "test_attacks9.py::test_a_pulumi_replace",
        ),
    ),
    Guarantee(
        "Lifecycle protects data, not only configs",
        "No front door (the CLI, Pulumi's update and destroy, the agent's heal) deletes a "
        "protected or observed resource's messages through its parts: the entries of a "
        "protected bucket, the consumers an `interest` stream needs (removed, replaced or "
        "re-filtered: measured 10 of 10 messages gone before), or a consumer the server "
        "would expire (`inactive_threshold`). A forged protection record is printed "
        "escaped and cut. Every flag given, messages counted on a real server.",
        ("test_lifecycle_holes.py::",),
    ),
    Guarantee(
        "A policy deny stops every front door before any step",
        "A plan for which a `deny` rule does not hold is refused by the executor's one check, "
        "before any step and before any question: the CLI, the GitHub Action, the Pulumi "
        "provider and the engine API refuse with exit status 3 (`PolicyDenied`), naming the "
        "rule and the resource, even with `--allow-data-loss`; messages counted after: "
        "nothing changed. `step.loss_messages` sees the messages a lossy update deletes. A "
        "broken rule is a `FILE:LINE` error before the server is contacted (a listening "
        "socket counts no connection); a rule that cannot be evaluated is a finding, never a "
        "crash. Attacks that got past a deny before: a CEL comment with an apostrophe hiding "
        "the code after it from the field reader, an ignored field judged on the spec "
        "instead of the server, a saved plan with the project's policies removed, a "
        "tighter `max_bytes` counted as one message lost, the last consumer of an interest "
        "stream pruned or replaced (every message goes with it) counted as none, a deny "
        "hidden behind 'pass --yes'.",
        (
            "test_front_doors.py::test_every_front_door_refuses_a_policy_deny",
            "test_policy.py::",
            "test_policy_bypass.py::",
        ),
    ),
    Guarantee(
        "A saved plan applies exactly what was reviewed, or nothing",
        "`reconcile apply FILE` writes only when the file is unedited, every spec, overlay, "
        "project, policy and value file is byte-identical to those planned from, the server "
        "is the same one (cluster or server name, domain, account: checked before the apply "
        "lock), and a fresh plan made with the saved flags has the same steps against the "
        "same observed live configs. Otherwise it exits 1, names what changed, and leaves "
        "every stream, consumer and message count as it was. The executed plan is always "
        "the fresh one, so a file edited to add a step or change a config, its digest "
        "recomputed, is still refused. The file grants no destructive flag and holds no "
        "credential or secret value (checked as text, base64 and SHA-256). A plan file "
        "that is a pipe, or larger than any plan, is refused unread; the Action never "
        "writes one into a spec folder.",
        (
            "test_saved_plans.py::",
            "test_attacks9.py::test_a_plan_file_that_is_a_pipe",
            "test_attacks9.py::test_a_saved_plan_larger",
            "test_attacks9.py::test_the_action_refuses_a_plan_file_inside",
        ),
    ),
    Guarantee(
        "An edited saved plan cannot widen what apply does",
        "A saved plan edited by whoever holds the artifact, its digest recomputed, cannot "
        "apply another environment's folder or drop its overlays (it created the staging "
        "stream in prod before), run as another owner, take over or prune without the "
        "applier's flag (a prune deleted an undeclared stream holding 4 messages before), "
        "drop a policy file the project or the apply names, show one value and apply "
        "another (duplicate keys), or crash apply with a traceback (bad salt, 100,000-deep "
        "JSON). It is refused with one line and nothing on the server changes; messages "
        "counted before and after.",
        ("test_saved_plan_attacks.py::",),
    ),
    Guarantee(
        "Drift ignore rules hide only app-made resources and never change a step",
        "A drift ignore rule hides only unmanaged resources (live, with neither a spec nor a "
        "managed marker), however wide its glob: declared resources still drift or go "
        "missing under `Stream *` / `Consumer */*`. The planner never reads the rules: "
        "`plan` and `apply --prune` make the same steps with or without them, and the app's "
        "consumer and its messages are untouched. Each rule's count is shown in every "
        "report; a bad rule is a `FILE:LINE` error before anything connects.",
        ("test_drift_ignore.py::",),
    ),
    Guarantee(
        "An over-committed plan changes nothing",
        "A plan that reserves more than the account's JetStream limits allow (storage per "
        "type and tier, `max_streams`, `max_bytes_required`, the largest stream, consumers "
        "per stream) is refused before its first step, in `plan` and in `apply`, naming each "
        "resource that adds to the total at its spec's line; stream and message counts are "
        "unchanged afterwards (without the check, apply created the streams that fit and "
        "failed on the next one with err 10047). Deletes free nothing for creates of the "
        "same apply (they run last). The rule matches each server of the matrix exactly at "
        "a limit's edge, and counts replicas as a 3-node cluster does. Also refused before "
        "any step, where they used to fail part-way: consumers above the account's "
        "`max_ack_pending`, KeyValue entries their bucket would refuse (`max_bytes`, "
        "`max_value_size`), a migration's temporary stream on a full account, and the "
        "apply lock's own bucket filling `max_streams`. Drift reports an over-commit as a "
        "warning and keeps its 0/2 exit codes.",
        ("test_capacity.py::", "test_capacity_attacks.py::"),
    ),
    Guarantee(
        "What other tools made round-trips without surprises",
        "Buckets created by nats-py (and the configs nats.go, the nats CLI and older Go "
        "clients create) export as buckets whose plan only adopts them; applying that "
        "export keeps every setting, message and key, on every server of the matrix. A "
        "Terraform module's references resolve as Terraform would, and one that cannot be "
        "known stops the import at its `FILE:LINE`, never guessed, with bounded work. NACK "
        "Accounts never share specs: each Account's streams apply only to its own "
        "environment (two real servers, each holding only its own `ORDERS`), and an import "
        "that would put them in shared specs is refused before anything is written.",
        (
            "test_client_buckets.py::",
            "test_import_terraform_refs.py::",
            "test_import_nack_accounts.py::",
        ),
    ),
    Guarantee(
        "An export or import never hides or invents resources",
        "An export of client-made `KV_`/`OBJ_` streams writes a bucket only when the "
        "document, validated as a user's file, means the live stream exactly (45 look-alike "
        "and client-made streams probed: export, plan, apply, plan again changed no setting "
        "and lost no message or key). A `value_file` never removes a spec from a plan (it "
        "used to let `apply --prune` delete the stream). Terraform resources Terraform would "
        "not create (`count = 0`) or would create several of are never single specs; a "
        "`sensitive` variable is never shown or copied; doubling values are bounded. NACK "
        "Account folders stay inside `--out` (`../../evil` wrote outside it before), and an "
        "Account is never tied to an existing environment on other servers.",
        ("test_roundtrip_attacks.py::",),
    ),
    Guarantee(
        "No half-apply over a stream's consumer limits",
        "A consumer above its stream's `consumer_limits` (`max_ack_pending`, "
        "`inactive_threshold`; the stream declared, or live and `external`), or a stream "
        "update lowering the limits below a live consumer, is refused at its `FILE:LINE` "
        "before any step. The server refuses each (err 10121, 10153, 10069), but only when "
        "its step comes, after the other steps of the apply ran; measured alike on "
        "2.10.26 to 2.15.1. Messages counted after every refusal. A mirror, a source or a "
        "standby of a stream limiting `max_ack_pending` is refused at its line: the server "
        "refuses the consumer the copy reads with (err 10082) and the copy never receives "
        "a message, on every release of the matrix.",
        ("test_consumer_limits.py::",),
    ),
    Guarantee(
        "The agent heals only what deletes nothing",
        "In heal mode `reconcile watch` applies creates and lossless updates only, under the "
        "apply lock and re-planned under it. A replace, delete, migration or lossy update, "
        "anything depending on one (a consumer of a replaced stream, a mirror of it), a "
        "step lifecycle prevents, and every resource in lifecycle `mode: observe` is "
        "reported as needing a person and never written; messages counted before and after. "
        "A resource another writer keeps changing back is healed 5 times, then held back "
        "(`contested`, naming the writer) and healed again when the hold ends; a person's "
        "edits are never held, and a held stream's consumers are still healed.",
        (
            "test_agent_flapping.py::",
            "test_attacks7.py::test_a_spec_edited_again",
            "test_attacks7.py::test_a_held_stream",
            "test_agent.py::test_a_repair_that_would_destroy_data_is_reported_and_never_applied",
            "test_agent.py::test_a_resource_in_lifecycle_observe_mode_is_never_written",
            "test_agent.py::test_observe_mode_reports_drift_and_writes_nothing",
        ),
    ),
    Guarantee(
        "The agent says who changed what",
        "Drift made by another client (nats-py, directly) is reported with the client's "
        "name, user, account, host and time from the server's API audit, and healed in "
        "heal mode; a stream deleted out of band is created again and reported with who "
        "deleted it and how many messages it held; the agent's own calls are never "
        "attributed; an audit delivered after the stream's event is waited for (up to 1 s), "
        "so the heal still names who did it, and one that comes while a cycle reads is kept "
        "for the next cycle's heal; no one is credited with a change they did not make (a "
        "call that changed nothing or that the server refused, a stream deleted before a "
        "spec declared its name).",
        (
            "test_agent.py::test_drift_by_another_client_is_healed_and_says_who",
            "test_agent.py::test_a_heal_waits_for_the_audit_that_comes_late",
            "test_agent.py::test_a_change_whose_audit_comes_while_a_cycle_finds_it_in_sync",
            "test_agent.py::test_a_change_that_changed_nothing_is_not_blamed",
            "test_agent.py::test_a_call_the_server_refused_is_not_blamed",
            "test_agent.py::test_who_deleted_a_stream_nobody_declared_is_not_blamed",
            "test_agent.py::test_a_stream_deleted_out_of_band_is_created_again",
            "test_agent.py::test_a_consumer_changed_by_another_client_is_healed",
        ),
    ),
    Guarantee(
        "The agent runs as a service",
        "It reconnects after nats-server is killed and restarted on the same port and heals "
        "drift made after the restart; it holds no lock while idle (a CLI apply succeeds "
        "meanwhile); without advisory permissions it says so and polls; SIGTERM ends it "
        "with exit 0 and the lock free; a commit pushed to the watched branch is planned and "
        "healed, every report naming it; `/metrics` parses with prometheus-client's own "
        "parser.",
        (
            "test_agent_service.py::",
            "test_agent_git.py::",
        ),
    ),
    Guarantee(
        "A long plan never hides a refusal",
        "Over 50 steps, text and Markdown fold the plan, but never a destructive step, a "
        "migration, a step lifecycle prevents or a consumer re-created with its replaced "
        "stream; name lists and the losses preview are capped by characters, so a policy "
        "deny and every destructive step stay inside GitHub's 65,536 characters (1,000 "
        "pruned streams with long names, 200 app-made streams, forged `</details>` owners); "
        "no verdict shows a tick over a plan apply refuses.",
        ("test_reviewer_output_attacks.py::",),
    ),
    Guarantee(
        "JSON Lines stay parseable under Ctrl-C and forged names",
        "`apply --format json` writes each record whole (Ctrl-C while a slow reader blocks "
        "the plan line no longer cuts it) and in ASCII, so a forged owner holding U+2028, "
        "NEL, C1 controls or bidi overrides cannot split a line or reach the terminal.",
        ("test_apply_json_lines_interrupt.py::",),
    ),
    Guarantee(
        "Ignore rules never hide a replace or the tool's own metadata, nor read outside",
        "A field rule never hides a field only a replace or migration can undo, nor the "
        "tool's own metadata (the managed-by marker, the protection record); rules matching "
        "every field are refused; a `.reconcileignore` or `reconcile.yaml` that is a "
        "symlink out of the repository is refused unread (it used to quote the target's "
        "line, e.g. `/proc/self/environ`, into the error and the PR comment).",
        ("test_drift_ignore_attacks.py::", "test_ignore_file_symlink.py::"),
    ),
    Guarantee(
        "An interest stream's consumer never drops messages unannounced",
        "A consumer update that narrows its filter, or the delete of one of several "
        "consumers, on a `retention: interest` stream makes the server delete the messages "
        "no consumer needs any more (measured 50 -> 30 and 50 -> 20 on 2.15.1 and 2.10.26). "
        "The plan marks such a step destructive, so apply refuses it without "
        "`--allow-data-loss` and nothing is deleted; it counts the messages on subjects no "
        "filter takes any more and marks the part other consumers may have acknowledged as "
        "uncounted. Widening a filter is no loss.",
        ("test_interest_filter_loss.py::",),
    ),
    Guarantee(
        "An unattended heal never does what a person or a newer commit would not",
        "A heal applies only steps a full plan of the branch head allows: an advisory's "
        "targeted re-plan is used only while the spec files are those the last full plan "
        "checked (a policy deny elsewhere refuses the heal); it re-plans with the lock held "
        "and sees messages that arrived meanwhile (1,500 kept); it applies nothing when the "
        "branch moved while it waited for the lock, and that look at the branch is bounded "
        "(a hung git server never keeps the lock). A forged advisory naming an impossible "
        "stream used to stop the agent; a flood costs one full plan. Losing the lock stops "
        "that heal, not the service; SIGTERM during a hung git fetch still stops it; "
        "credentials in a `--git` URL (user info, query, scp form, dulwich's errors) are "
        "never printed.",
        ("test_agent_attacks.py::",),
    ),
    Guarantee(
        "A restore replaces only what it proves is its own, under apply's rules",
        "A restore holds the apply lock, runs the policies (a deny exits 3 with nothing "
        "restored) and the lifecycle rules (`prevent_destroy` on every path, also when "
        "recorded while the question waited), and checks the account's room (max_bytes "
        "reservations and the bytes the backup brings) before anything is written. A live "
        "stream is replaced without the replace flags only when it carries this backup's "
        "restore marker and holds nothing the backup does not: a worked work-queue, a purged "
        "stream or a forged marker never brings finished jobs back. A restore into a fresh "
        "server verifies on every release of the matrix; a re-run says it is done; the last "
        "line counts every stream. A restore it refuses over a live stream of the backup's "
        "name names each difference, on that stream's one line.",
        (
            "test_restore_differences.py::",
            "test_restore_holes.py::",
            "test_restore_rules.py::",
            "test_restore_verify.py::",
            "test_restore_room.py::",
            "test_restore_attacks.py::",
            "test_restore_interrupt.py::",
        ),
    ),
    Guarantee(
        "A backup never takes what is not its own",
        "A backup writes only into an empty folder or one an earlier backup wrote, and "
        "removes only files a manifest of its own lists; a stream's data can never collide "
        "with the backup's own files; a full disk is one line and no manifest; the tool's "
        "own lock bucket is left out; a mistyped or lost stream never costs the earlier "
        "backup's copy; a hand-edited manifest is one error naming it.",
        ("test_backup_holes.py::", "test_backup_attacks.py::"),
    ),
    Guarantee(
        "A saved plan runs only where it was made, by one set of rules",
        "A saved plan is bound to the account's lineage (a value kept once in the lock "
        "bucket): two servers both named `nats` are told apart and the plan is refused on "
        "the other, naming both; the CLI and the Action resolve a saved plan by one table "
        "of who decides what, with the same refusals; a removed protected stream is listed "
        "as protected, never under `--prune`.",
        (
            "test_saved_plan_lineage.py::",
            "test_saved_plan_doors.py::",
            "test_protected_orphans.py::",
        ),
    ),
    Guarantee(
        "An over-committed plan changes nothing",
        "Where the server's own JetStream limits can be read (`--monitor`, a system "
        "account), a plan the server cannot hold is refused before any step; where they "
        "cannot, the plan says they are unknown, never 'no limit'; an apply refused for room "
        "removes again only what it created and is still empty; a KeyValue entry over "
        "`max_payload` is refused by the plan.",
        ("test_capacity_server.py::",),
    ),
    Guarantee(
        "A policy rule cannot stop CI or the agent",
        "A rule whose shape is too costly is refused at load at its FILE:LINE; every "
        "evaluation runs in a worker with a CPU budget and is a finding naming the rule "
        "when over it; the agent answers /healthz and /readyz and stops on SIGTERM while "
        "such a rule is evaluated.",
        ("test_policy_budget.py::",),
    ),
    Guarantee(
        "Many environments, shards and failovers keep every message",
        "One agent serves many environments, a slow or dead server delaying none of the "
        "others; a killed shard restarted takes its environment back, and two agents on one "
        "environment heal each change once. A planned failover fences the origin, waits for "
        "the mirror, promotes it and starts the consumers at their ack floor: every "
        "acknowledged message is on the promoted side exactly once, and a failover killed "
        "at any step is finished by a re-run. A standby whose server restarted (its "
        "mirror's duplicate window dropped) gets the window back before the fence, and a "
        "publisher's retry within it of a message acknowledged before the fence is stored "
        "once. A server that stops answering is said "
        "unreachable while the others heal; one without JetStream is retried with a growing "
        "backoff; a dripping monitoring endpoint, a broken seed, a listener whose greeting is "
        "no NATS server's or an error no check foresaw fails its environment only, and a "
        "shard whose every server is down stays ready (no rollout stalls on it). A later "
        "INFO of no server's shape closes that connection, and so do a protocol line of "
        "more than 64 KiB with no end and a message announced over 128 MiB: a listener "
        "announcing a terabyte, or sending a line that never ends, is said unreachable and "
        "named with no more than that held (a plan fails naming it), while a reply over "
        "the server's max_payload is read; a list whose pages never end "
        "fails that plan, a stop never waits for a connection still being opened, and a "
        "forged reply to one step fails that step with every step reported. A server that "
        "answers and refuses (credentials, TLS, a missing client certificate, a route or "
        "leaf node port, a listener that is no NATS server) makes `/readyz` 503, one that "
        "is down does not. Two shards healing two environments of one seat (one account, "
        "whichever its users) cannot both heal: the second is refused by the first's "
        "claim on the server until the first's agent stops (deleting it) or that claim "
        "goes stale, whatever lineage the account's bucket holds "
        "now; the seat follows the project served: an environment that starts writing "
        "takes it first, one that stops (observed, removed by a commit, moved to other "
        "connection settings) frees it and its claim at once. An edited project file (an "
        "environment's, or "
        "the one spec PATHS are given with) is read again under a running agent, validated "
        "first: an invalid edit keeps the last valid one, a deny rule added holds from the "
        "next plan. A list "
        "that grows in a burst while it is read is read again. An environment added while "
        "the shards run is a `reconcile_environment_not_served` series on its shard until a "
        "restart serves it; clients that never read a large `/status` hold no copy of it "
        "each.",
        (
            "test_attacks19.py::",
            "test_attacks11.py::",
            "test_attacks12.py::",
            "test_agent_seat_claims.py::",
            "test_agent_project_edits.py::",
            "test_greeting_attacks.py::",
            "test_agent_envs.py::",
            "test_agent_envs_attacks.py::",
            "test_agent_envs_attacks6.py::",
            "test_greeting_attacks.py::test_one_environment",
            "test_greeting_attacks.py::test_a_failure_no_check",
            "test_attacks8.py::test_an_info_no_server_sends",
            "test_attacks8.py::test_a_stop_never_waits",
            "test_attacks8.py::test_a_list_whose_pages_never_end",
            "test_attacks8.py::test_a_forged_reply_to_one_step",
            "test_read_bounds.py::",
            "test_parser_bounds.py::",
            "test_dr_failover.py::",
            "test_attacks16.py::test_a_new_lineage_never_lets_a_second_shard",
        ),
    ),
    Guarantee(
        "What another client wrote never decides a failover",
        "A standby promoted by hand with writes of its own, a fence removed by someone "
        "else, a failover onto the fenced old origin, another owner's stream, a consumer "
        "someone made or paused, a message deleted from the mirror, a mirror of another "
        "stream, an origin whose subjects differ from the spec, a standby that is no "
        "mirror on other subjects, a mirror someone gave a config the spec does not declare "
        "(a smaller max_msg_size, no_ack, interest retention, memory storage, fewer "
        "replicas, consumer limits...): each is refused or fenced "
        "and named, and no acknowledged message is left on neither side; Ctrl-C between "
        "the fence and the promotion gives the origin its writes back. A failback never "
        "replaces an old origin that holds writes the primary lacks, whatever the flags: "
        "it is prevented, naming the sequence.",
        (
            "test_dr_attacks.py::",
            "test_dr_attacks18.py::test_a_plain_stream",
            "test_dr_attacks18.py::test_a_mirror_someone_gave",
            "test_dr_attacks18b.py::",
            "test_promotion.py::",
        ),
    ),
    Guarantee(
        "A failover, a rollback or a restore never leaves both sides taking writes",
        "A fenced origin is never given its subjects back but by a failback or a rollback, also "
        "when its spec lost `standby:` or no environment is named; a rollback with the standby "
        "unreachable un-fences nothing and names it, and is refused only by what guards it (a "
        "standby that took writes), never by what guards a promotion (a mirror lacking messages "
        "or gone, a consumer made on it, another owner's mirror), which kept the origin fenced, "
        "nor by a fenced old origin on the standby's side, which takes no writes; "
        "a standby promoted by hand before it caught up, a sealed one, one whose limits someone "
        "tightened or one whose subjects another stream holds is refused before the fence; a "
        "refusal after the fence gives the origin its writes back; an origin consumer made again "
        "by someone never decides where a standby's consumer starts; the verify's probe passes "
        "only on the promoted stream's own refusal, on each declared subject; an error no check "
        "foresaw in one pair is that pair's report and a re-run finishes it, verifying again "
        "a pair whose other steps are done (a failed verify is never taken for a passed one). "
        "A backup is never "
        "restored as a plain stream where the specs declare the standby mirror, nor as a mirror "
        "of anything but the origin the spec declares (another domain's stream of that name, a "
        "part of it, one republishing, denying purges, allowing message TTLs or bringing "
        "consumers), nor beside a pair on its subjects, nor into the primary as a mirror or with "
        "its subjects while the standby takes the writes, nor over a fenced origin (with "
        "`--server` too), and a restore runs apply's live checks first. Both sides are counted "
        "before and after each case.",
        (
            "test_dr_holes.py::",
            "test_dr_leftovers.py::",
            "test_dr_restores.py::",
            "test_standby_guard.py::",
            "test_unfence_by_hand.py::",
            "test_dr_attacks4.py::",
            "test_dr_flow5.py::",
            "test_restore_live_checks.py::",
            "test_dr_leftovers19.py::",
            "test_dr_leftovers20.py::",
        ),
    ),
    Guarantee(
        "Every door waits for the lock and keeps what it did not plan to delete",
        "Pulumi's create, update and delete wait for another run's apply lock and fail "
        "naming it with nothing changed, whatever lock timeout is written; a destroy never "
        "deletes another project's stream of the same name, nor one made again without "
        "the managed-by marker; a stream planned empty that "
        "gained messages is not deleted; a stream under a backup's temporary name that "
        "holds anything its origin lost is never taken for a leftover; a lock timeout of "
        "nan or inf is refused, never a wait nobody can end; a Pulumi create (the create "
        "of a replace too, refused at its preview) or update never adopts, writes, "
        "migrates or replaces a resource another Pulumi resource holds, whatever "
        "allow_destroy says, and a delete leaves it: resources swapping names in one "
        "`pulumi up` are refused, the stream keeping its messages and the other's claim (the "
        "next `pulumi up` deletes the old resource only as its own allow_destroy allows). "
        "A backup makes a memory "
        "stream's temporary mirror only under the apply lock; a restore deletes a stream "
        "under its temporary name only when its marker, sequences and first message prove "
        "it that restore's leftover, and checks so before it replaces anything.",
        (
            "test_stage_attacks.py::",
            "test_pulumi_attacks.py::",
            "test_backup_memory.py::test_a_memory_streams_mirror_is_made_only_under",
            "test_backup_memory.py::test_a_stream_under_the_temporary_name",
        ),
    ),
    Guarantee(
        "A KeyValue entry lands in its own bucket, or the plan says why",
        "Every KeyValue write names its bucket's stream (`Nats-Expected-Stream`): a stream "
        "that took the bucket's subjects stores nothing of it, a secret included, and the "
        "plan counts that header against `max_value_size`. An entry of a bucket that takes "
        "no writes (a mirror, a stream moved off the bucket's subjects) is refused at its "
        "`bucket:` line, and `--prune` never deletes the bucket a declared entry is "
        "written to. A declared bucket applications fill is read in batches, by a "
        "read-only user too: the plan's orphans, steps and hidden secrets are those of "
        "the one-key-a-request read on every server from 2.10, keys written, deleted, "
        "purged or taken over while it reads included. Declared keys are read in those "
        "batches too, each as one read of it on its own would find it: a reply taken only "
        "from the bucket's own stream, as fresh as its leader's listing, and never one "
        "that names a key twice or one not asked, and only for a key the leader listed (a "
        "replica behind a purge or a delete is never taken for the leader, nor one that lost a "
        "key the leader holds); keys the tool "
        "marked are taken from those batches by the same rule. A key the server expired "
        "into a marker of its own (`Nats-Marker-Reason`) is read as removed, as the "
        "official clients read it: the plan creates it.",
        (
            "test_attacks18d.py::",
            "test_kv_scan.py::",
            "test_kv_declared.py::",
            "test_attacks19b.py::",
            "test_kv_leftovers20.py::",
            "test_attacks20.py::",
        ),
    ),
    Guarantee(
        "A program reading JSON never gets nothing",
        "With `--format json`, a plan, drift or apply that ends in an error (an invalid "
        "spec, a refused plan, an unreachable server) prints the error on stdout as JSON "
        "too (`schemas/error.schema.json`: the refusal kind, the exit status, each "
        "FILE:LINE problem), never a second document after a plan, and never a password "
        "from the server URL; a refused apply changes no message.",
        ("test_json_errors.py::",),
    ),
)


def run_suite(figures: Path, junit: Path, extra: list[str]) -> int:
    env = {**os.environ, "RELIABILITY_FIGURES": str(figures)}
    # -m "": every test of the suite, the slow ones included (addopts leave those out)
    command = [sys.executable, "-m", "pytest", *SUITE, "-q", "-p", "no:cacheprovider", "-m", ""]
    command += [f"--junitxml={junit}", *extra]
    return subprocess.call(command, cwd=REPO, env=env)


def read_results(junit: Path) -> dict[str, dict[str, Any]]:
    """nodeid-ish key ``module.py::test_name[param]`` → outcome and seconds."""
    results: dict[str, dict[str, Any]] = {}
    if not junit.exists():
        return results
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = (case.get("classname") or "").rsplit(".", 1)[-1] + ".py"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        key = f"{module}::{case.get('name')}"
        folder = (case.get("classname") or "").rsplit(".", 1)[0].replace(".", "/")
        results[key] = {
            "outcome": outcome,
            "seconds": round(float(case.get("time") or 0), 2),
            "path": f"{folder}/{module}::{case.get('name')}",
        }
    return results


def read_figures(path: Path) -> dict[str, dict[str, int]]:
    """``module.py::test`` → figure → value."""
    found: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    if path.exists():
        for line in path.read_text().splitlines():
            record = json.loads(line)
            key = record["test"].split("/")[-1]
            found[key][record["figure"]] += int(record["value"])
    return found


def _matches(key: str, pattern: str) -> bool:
    return key.startswith(pattern)


def build_report(results: dict[str, Any], figures: dict[str, dict[str, int]]) -> dict[str, Any]:
    guarantees = []
    totals: dict[str, int] = defaultdict(int)
    for guarantee in GUARANTEES:
        tests = {k: v for k, v in results.items() if any(_matches(k, p) for p in guarantee.tests)}
        sums: dict[str, int] = defaultdict(int)
        for key, counts in figures.items():
            if any(_matches(key, p) for p in guarantee.tests):
                for name, value in counts.items():
                    sums[name] = (
                        max(sums[name], value) if name.endswith("_max") else sums[name] + value
                    )
        for name, value in sums.items():
            totals[name] = (
                max(totals[name], value) if name.endswith("_max") else totals[name] + value
            )
        outcomes = {t["outcome"] for t in tests.values()}
        status = (
            "proved"
            if tests and outcomes == {"passed"}
            else ("not run" if not tests else "FAILING")
        )
        guarantees.append(
            {
                "title": guarantee.title,
                "claim": guarantee.claim,
                "status": status,
                "tests": tests,
                "figures": dict(sorted(sums.items())),
            }
        )
    return {
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "python": platform.python_version(),
        "nats_server": _server_version(),
        "tests": len(results),
        "passed": sum(r["outcome"] == "passed" for r in results.values()),
        "seconds": round(sum(r["seconds"] for r in results.values()), 1),
        "figures": dict(sorted(totals.items())),
        "guarantees": guarantees,
    }


def _server_version() -> str:
    sys.path.insert(0, str(REPO / "tests"))
    try:
        from servers import default_binary

        binary = str(default_binary())
        out = subprocess.run([binary, "--version"], check=False, capture_output=True, text=True)
        return out.stdout.strip() or out.stderr.strip()
    except Exception as err:  # a report without the version is still a report
        return f"unknown ({err})"


FIGURE_NAMES = {
    "faults_survived": "faults survived",
    "rounds_run": "model rounds run",
    "inputs_tried": "inputs tried",
    "messages_checked": "message checks",
    "refused_replaces": "replaces refused",
    "concurrent_applies": "concurrent applies",
    "lock_contentions_refused": "lock timeouts",
    "lost_leases_stopped": "runs stopped on a lost lease",
    "reconciler_kills": "reconciler kill -9",
    "server_kills": "server kill -9",
    "server_freezes": "server SIGSTOPs",
    "cluster_node_outages": "cluster node outages",
    "leader_changes": "stream leader changes",
    "security_cases": "security cases",
    "outputs_grepped": "outputs grepped for secrets",
    "peak_rss_mib_max": "highest peak RSS (MiB)",
    "paused_runs_fenced": "paused runs fenced",
    "race_rounds": "plans read while the server changed",
    "refused_shrinks": "lossy edits refused",
    "secret_error_paths": "secrets pushed through error paths",
    "shrink_kinds": "lossy update kinds checked",
    "scale_resources_checked": "resources checked at scale",
    "foreign_kept": "other owners' streams kept",
    "export_files": "exported files checked",
    "migration_crashes": "migrations killed and finished",
    "migration_messages": "messages compared after a killed migration",
    "leftovers_refused": "deleted streams kept from coming back",
}


def _figures_text(figures: dict[str, int]) -> str:
    return ", ".join(f"{FIGURE_NAMES.get(k, k)}: {v:,}" for k, v in figures.items()) or "-"


KNOWN_LIMITS = (
    "Lease expiry compares the holder's `expires_at` with the reader's clock: hosts' clocks "
    "must agree within a few seconds (NTP).",
    "A locked apply publishes to `$KV.RECONCILE_LOCKS.apply`: a least-privilege user needs "
    "`$KV.RECONCILE_LOCKS.>` besides `$JS.API.>` and `_INBOX.>`, or `--no-lock`.",
    "The Pulumi provider applies one resource per call and does not take the lock "
    "(Pulumi's own state lock serialises its runs).",
    "A `kill -9` of nats-server in the middle of a stream creation can leave that stream's "
    "folder without `meta.inf`; the restarted server then reports unhealthy (`/healthz`) "
    "until the stream is created again, which the next apply does.",
)


def render_markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Reliability",
        "",
        "<!-- generated by `python bench/reliability_report.py`: edit the script, not this -->",
        "",
        "What `reconcile` guarantees under faults, concurrency and hostile input, the tests "
        "under `tests/reliability/` (and the end-to-end and integration files named below) "
        "proving each guarantee against real nats-server processes, and "
        "the figures of the last run.",
        "",
        f"Last run: {report['generated_at']}, {report['passed']}/{report['tests']} tests passed "
        f"in {report['seconds']} s of test time (Python {report['python']}, "
        f"{report['nats_server']}).",
        "",
        f"Figures in all: {_figures_text(report['figures'])}.",
        "",
        "| guarantee | status | figures |",
        "|---|---|---|",
    ]
    for g in report["guarantees"]:
        lines.append(f"| {g['title']} | {g['status']} | {_figures_text(g['figures'])} |")
    for g in report["guarantees"]:
        lines += ["", f"## {g['title']}", "", g["claim"], "", "Proved by:", ""]
        for key, result in sorted(g["tests"].items()):
            where = result.get("path", key)
            lines.append(f"- `{where}`: {result['outcome']} ({result['seconds']} s)")
        if not g["tests"]:
            lines.append("- (not run)")
    lines += ["", "## Known limits", ""] + [f"- {limit}" for limit in KNOWN_LIMITS]
    lines += [
        "",
        "## Running it",
        "",
        "```",
        "python bench/reliability_report.py            # runs the tests, rewrites this file",
        "pytest tests/reliability -m 'not slow'        # the quick part",
        "```",
        "",
        "Breaking a stale lock by hand: `reconcile lock status --server URL` shows the holder;",
        "`reconcile lock break --server URL` removes an expired lease, `--force` a live one",
        "(only when that run is known to be gone). `reconcile apply --no-lock` skips the lock.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "out" / "reliability.json")
    parser.add_argument("--markdown", type=Path, default=REPO / "RELIABILITY.md")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        figures_file, junit = Path(scratch) / "figures.jsonl", Path(scratch) / "junit.xml"
        code = run_suite(figures_file, junit, args.pytest_args)
        report = build_report(read_results(junit), read_figures(figures_file))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    args.markdown.write_text(render_markdown(report))
    print(json.dumps({"tests": report["tests"], "passed": report["passed"], **report["figures"]}))
    return code


if __name__ == "__main__":
    sys.exit(main())
