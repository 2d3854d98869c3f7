"""Which fault-machine rules reach the guarantee of each conformance check.

Every check of the suite (``area.check_name``) is mapped to the rules of the
state machine (:mod:`kit.machines.machine`) whose steps exercise the same
guarantee against the reference engine, or is listed in :data:`UNREACHED`
with the reason no lock-step machine can judge it. A new check must be added
here (``tests/test_machine_coverage.py`` fails until it is), so the machines
never silently fall behind the suite.

    python -m kit.machines.coverage        # the guarantees no rule reaches; exit 1 if any is unmapped
    nox -s coverage                        # the same in its own virtualenv
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Iterable

__all__ = ["REACHED_BY", "UNREACHED", "all_check_ids", "machine_rules", "main", "problems", "unreached"]

_CLAIMING = ("claim_runs", "claim_and_decide", "decide")
_FENCE = ("decide", "fenced_call", "zombie", "zombie_after_takeover", "at_lease_expiry")

#: check id -> the rules whose generated steps exercise the same guarantee.
REACHED_BY: dict[str, tuple[str, ...]] = {
    # -- schema -------------------------------------------------------------------------------
    "schema.migrate_then_verify_passes": ("verify_schema",),
    "schema.migrate_is_idempotent": ("schema_drift",),
    "schema.verify_fails_closed_on_partial_schema": ("schema_drift",),
    "schema.verify_fails_closed_on_newer_schema": ("schema_drift",),
    "schema.verify_fails_closed_on_tampered_migration": ("verify_schema",),
    # -- clock --------------------------------------------------------------------------------
    "clock.test_clock_set_is_exact": ("advance_to", "timer_boundary", "at_lease_expiry", "absolute_times"),
    "clock.test_clock_advance_is_exact": ("advance", "timer_boundary"),
    "clock.test_clock_is_shared_by_stores": ("advance", "advance_to", "claim_runs"),
    "clock.store_clock_is_aware_utc": ("advance", "advance_to"),
    "clock.database_clock_is_monotonic_across_calls": ("clock_probe",),
    "clock.database_clock_moves_inside_a_transaction": ("clock_probe",),
    "clock.database_clock_has_declared_resolution": ("clock_probe",),
    "clock.test_clock_refused_on_database_clock": ("refused_arguments",),
    # -- definitions ---------------------------------------------------------------------------
    "definitions.ensure_inserts_and_returns_the_row": ("define", "definition_versions"),
    "definitions.ensure_never_overwrites": ("define", "definition_versions", "interleave_first_wins"),
    "definitions.ensure_is_repeatable": ("define", "start"),
    "definitions.get_absent_definition_is_none": ("definition_versions", "same_run_id_in_other_tenant"),
    "definitions.versions_are_distinct": ("definition_versions",),
    "definitions.names_are_byte_exact": ("definition_versions",),
    "definitions.body_bytes_round_trip": ("definition_versions",),
    "definitions.digest_must_be_sha256_of_body": ("definition_versions",),
    "definitions.racing_first_calls_store_one_row": ("race", "interleave_first_wins"),
    # the state compared after a definition_versions step lists every name defined (and the LIKE patterns
    # "w_", "w%") through list_definition_versions in every tenant
    "definitions.versions_are_listed_in_code_point_order": ("definition_versions",),
    "definitions.the_name_matches_exactly": ("definition_versions",),
    "definitions.an_unknown_name_lists_nothing": ("definition_versions", "same_run_id_in_other_tenant"),
    "definitions.versions_are_listed_per_tenant": ("definition_versions",),
    # -- runs ---------------------------------------------------------------------------------
    "runs.start_creates_pending_run": ("start", "some_runs"),
    "runs.start_requires_an_ensured_definition": ("same_run_id_in_other_tenant", "start"),
    "runs.start_requires_the_stored_digest": ("definition_versions", "start"),
    "runs.repeated_idempotency_key_returns_existing_run": ("start", "some_runs"),
    "runs.retried_start_returns_existing_run": ("lost_ack",),
    "runs.duplicate_run_id_is_refused": ("start", "terminal_then_input"),
    "runs.concurrent_starts_with_one_key_create_one_run": ("race", "interleave_first_wins"),
    "runs.concurrent_starts_of_one_run_id_create_one_run": ("race", "interleave_first_wins"),
    "runs.get_absent_run_is_none": ("read_back",),
    "runs.list_runs_orders_by_code_point": ("list_page", "read_back"),
    "runs.pagination_is_stable": ("page_through", "list_page"),
    "runs.pagination_after_last_is_empty": ("page_through", "list_page"),
    "runs.list_runs_filters_by_status": ("read_back",),
    "runs.history_reads_page_by_seq": ("read_back",),
    "runs.export_state_matches_reads": ("read_back",),
    "runs.cancel_request_marks_and_wakes_blocked_run": ("cancel", "input_during_decision", "interleave_wake"),
    "runs.cancel_request_twice_is_duplicate": ("cancel", "lost_ack"),
    "runs.cancel_request_on_closed_or_absent_run": ("terminal_then_input", "cancel"),
    "runs.cancel_request_on_running_run_is_honoured_by_commit": ("input_during_decision", "interleave_wake"),
    # -- claims -------------------------------------------------------------------------------
    "claims.claim_sets_owner_generation_and_lease": _CLAIMING,
    "claims.claim_respects_limit": ("claim_runs", "paused_claim", "interleave_claims"),
    "claims.claim_takes_oldest_due_first": ("claim_runs", "claim_and_decide"),
    "claims.live_claim_blocks_other_claimers": ("claim_runs", "race", "interleave_claims"),
    "claims.lease_is_live_one_microsecond_before_expiry": ("at_lease_expiry",),
    "claims.lease_is_lost_exactly_at_expiry": ("at_lease_expiry",),
    "claims.expired_claim_is_reclaimed_with_next_generation": ("zombie_after_takeover", "at_lease_expiry"),
    "claims.generations_only_grow": ("zombie_after_takeover", "claim_runs"),
    "claims.stale_generation_commit_changes_nothing": ("zombie_after_takeover", "zombie"),
    "claims.stale_generation_with_same_owner_is_refused": ("zombie_after_takeover",),
    "claims.stale_renewal_changes_nothing": ("zombie_after_takeover", "zombie"),
    "claims.expired_commit_refused_without_newer_claim": ("at_lease_expiry",),
    "claims.other_owner_is_refused": ("race", "interleave_duplicates", "overlapping_duplicate_commit"),
    "claims.renewal_extends_from_store_now": ("fenced_call", "at_lease_expiry"),
    "claims.renewal_writing_unchanged_values_is_renewed": ("renew_at_once", "fenced_call"),
    "claims.release_makes_run_claimable_at_once": ("fenced_call", "race"),
    "claims.release_makes_no_decision": ("fenced_call",),
    "claims.stale_release_changes_nothing": ("zombie", "zombie_after_takeover"),
    "claims.load_claimed_returns_one_snapshot": ("decide", "claim_and_decide"),
    "claims.load_claimed_returns_exactly_the_waiting_input": ("command_round_trip", "exhaust_attempts",
                                                              "input_during_decision"),
    "claims.load_claimed_refuses_stale_claim": ("fenced_call", "zombie_after_takeover"),
    "claims.fenced_calls_on_absent_run_are_not_found": ("same_run_id_in_other_tenant", "fenced_call"),
    "claims.fenced_calls_on_terminal_run_are_terminal": ("terminal_then_input", "fenced_call"),
    "claims.terminal_runs_are_never_claimed": ("terminal_then_input", "claim_runs"),
    "claims.blocked_run_is_not_claimable": ("claim_and_decide", "claim_runs"),
    "claims.pending_run_wakes_exactly_at_wake_time": ("absolute_times", "advance_to"),
    "claims.blocked_run_wakes_at_its_deadline": ("absolute_times", "advance_to"),
    "claims.concurrent_claimers_never_double_claim": ("race", "interleave_claims"),
    "claims.claimers_skip_rows_locked_by_an_open_claim": ("paused_claim", "paused_claim_among_due_runs",
                                                          "interleave_claims"),
    # -- commit -------------------------------------------------------------------------------
    "commit.commit_appends_contiguous_history": ("decide", "claim_and_decide"),
    "commit.commit_bumps_revision_and_clears_claim": ("decide", "claim_and_decide"),
    "commit.revision_mismatch_changes_nothing": ("wrong_revision", "decide", "claim_and_decide"),
    "commit.outcome_precedence": ("decide", "zombie", "at_lease_expiry", "terminal_then_input"),
    "commit.retried_commit_changes_nothing": ("lost_ack",),
    "commit.commit_is_all_or_nothing": ("crash_during",),
    "commit.waking_writes_are_all_or_nothing": ("crash_during", "lost_ack"),
    "commit.session_killed_mid_commit_leaves_nothing": ("crash_during",),
    "commit.command_operation_keys_first_wins": ("decide", "claim_and_decide"),
    "commit.first_wins_within_one_decision": ("decide", "queued_commands"),
    "commit.timer_operation_keys_first_wins": ("decide", "timer_boundary"),
    "commit.terminal_commit_records_output_and_error": ("terminal_then_input", "decide", "big_numbers"),
    "commit.terminal_run_never_changes": ("terminal_then_input",),
    "commit.terminal_commit_closes_outstanding_work": ("terminal_then_input",),
    "commit.signal_during_decision_is_not_lost": ("input_during_decision", "interleave_wake"),
    "commit.completion_during_decision_is_not_lost": ("input_during_decision", "interleave_wake"),
    "commit.timer_fired_during_decision_is_not_lost": ("input_during_decision", "interleave_wake"),
    "commit.blocked_without_new_input_stays_blocked": ("claim_and_decide", "decide"),
    "commit.consumed_signal_records_revision_and_leaves_inbox": ("decide", "claim_and_decide"),
    "commit.consuming_twice_is_refused": ("zombie", "decide"),
    "commit.consuming_another_runs_input_is_refused": ("decide",),
    "commit.consuming_unfinished_or_foreign_work_is_refused": ("consume_unfinished", "command_round_trip", "decide"),
    "commit.event_operation_key_is_unique_per_run": ("decide", "claim_and_decide"),
    "commit.malformed_decisions_are_refused": ("decide",),
    "commit.parallel_commits_keep_histories_contiguous": ("race", "interleave_duplicates", "unit_of_work"),
    "commit.overlapping_duplicate_deliveries_commit_once": ("overlapping_duplicate_commit", "interleave_duplicates"),
    "commit.waking_write_beside_a_blocking_commit_is_not_lost": ("interleave_wake",),
    # -- commands -----------------------------------------------------------------------------
    "commands.claim_bumps_attempt_and_generation": ("claim_commands", "exhaust_attempts", "steal_command"),
    "commands.command_waits_for_its_delay": ("claim_commands", "advance_to"),
    "commands.claim_filters_by_queue": ("queued_commands", "exhaust_attempts"),
    "commands.commands_claimed_oldest_first": ("claim_commands", "queued_commands"),
    "commands.live_command_claim_is_exclusive_until_expiry": ("steal_command", "command_boundary"),
    "commands.heartbeat_extends_lease": ("command_call", "work", "command_boundary"),
    "commands.heartbeat_writing_unchanged_values_is_renewed": ("renew_at_once", "command_call", "work"),
    "commands.heartbeat_at_expiry_is_lost": ("command_boundary", "command_call"),
    "commands.complete_records_result_and_wakes_run": ("work", "command_round_trip"),
    "commands.second_completion_is_terminal_and_keeps_first_result": ("lost_ack", "command_call"),
    "commands.stale_completion_changes_nothing": ("steal_command", "command_call"),
    "commands.completion_after_expiry_is_refused": ("command_boundary", "command_call"),
    "commands.forged_owner_is_refused": ("race", "interleave_duplicates"),
    "commands.failure_after_expiry_is_refused": ("command_boundary",),
    "commands.heartbeat_after_expiry_is_refused": ("command_boundary",),
    "commands.forged_owner_failure_is_refused": ("command_call", "steal_command"),
    "commands.forged_owner_heartbeat_is_refused": ("command_call", "steal_command"),
    "commands.heartbeat_after_completion_is_terminal": ("exhaust_attempts", "command_call"),
    "commands.unknown_command_is_not_found": ("same_run_id_in_other_tenant", "command_call"),
    "commands.failure_schedules_retry_after_delay": ("exhaust_attempts", "work"),
    "commands.exhausted_attempts_fail_permanently_and_wake_run": ("exhaust_attempts",),
    "commands.non_retryable_failure_is_permanent": ("command_round_trip", "work"),
    "commands.permanent_failure_during_decision_is_not_lost": ("command_round_trip", "input_during_decision"),
    "commands.result_is_consumed_once": ("command_round_trip", "decide"),
    "commands.concurrent_command_claimers_never_double_claim": ("interleave_claims",),
    "commands.concurrent_duplicate_completions_apply_once": ("race", "interleave_duplicates"),
    "commands.command_claimers_skip_rows_locked_by_an_open_claim": ("interleave_claims",),
    # -- signals ------------------------------------------------------------------------------
    "signals.send_stores_pending_signal_and_wakes_run": ("signal", "input_during_decision"),
    "signals.duplicate_returns_existing_and_keeps_payload": ("signal", "lost_ack"),
    "signals.concurrent_duplicates_store_one_signal": ("race", "interleave_duplicates"),
    "signals.terminal_run_rejects_signal": ("terminal_then_input", "signal"),
    "signals.signal_to_absent_run_is_not_found": ("signal",),
    "signals.duplicate_after_close_is_still_duplicate": ("signal", "terminal_then_input"),
    "signals.dedup_keys_are_per_run": ("signal",),
    "signals.signal_on_running_run_marks_it": ("input_during_decision", "signal"),
    "signals.signals_are_listed_in_send_order": ("signal", "read_back"),
    # -- timers -------------------------------------------------------------------------------
    "timers.timer_never_fires_early": ("timer_boundary", "absolute_times"),
    "timers.timer_fires_exactly_at_fire_at": ("timer_boundary", "absolute_times"),
    "timers.timer_fires_once": ("fire_timers", "interleave_fire_timers"),
    "timers.fire_respects_limit_and_due_order": ("fire_timers", "timer_boundary"),
    "timers.absolute_fire_at_round_trips": ("absolute_times",),
    "timers.fired_timer_is_consumed_once": ("decide", "claim_and_decide"),
    "timers.cancelled_timer_never_fires": ("decide", "terminal_then_input"),
    "timers.timer_on_running_run_marks_it": ("input_during_decision",),
    "timers.concurrent_firers_fire_each_timer_once": ("race", "interleave_fire_timers"),
    # -- tenancy ------------------------------------------------------------------------------
    "tenancy.other_tenants_runs_are_invisible": ("same_run_id_in_other_tenant",),
    "tenancy.other_tenants_runs_are_unclaimable": ("same_run_id_in_other_tenant", "claim_runs"),
    "tenancy.other_tenants_runs_are_unsignalable": ("signal", "cancel"),
    "tenancy.other_tenants_claim_cannot_commit": ("decide", "fenced_call"),
    "tenancy.same_run_id_in_two_tenants": ("same_run_id_in_other_tenant",),
    "tenancy.definitions_are_per_tenant": ("same_run_id_in_other_tenant", "definition_versions"),
    "tenancy.other_tenants_commands_and_timers_are_untouched": ("same_run_id_in_other_tenant", "claim_commands",
                                                                "fire_timers"),
    "tenancy.colliding_run_id_is_untouched_by_other_tenant": ("same_run_id_in_other_tenant",),
    "tenancy.colliding_run_id_keeps_keys_per_tenant": ("same_run_id_in_other_tenant",),
    "tenancy.other_tenants_command_claim_is_not_found": ("command_call", "work"),
    # -- unit of work -------------------------------------------------------------------------
    "unit_of_work.operations_commit_together": ("unit_of_work",),
    "unit_of_work.exception_rolls_back_everything_and_reraises": ("unit_of_work", "uow_inner_failure"),
    "unit_of_work.nested_blocks_reuse_the_outer_transaction": ("unit_of_work",),
    "unit_of_work.inner_failure_rolls_back_the_whole_unit": ("uow_inner_failure",),
    "unit_of_work.callbacks_run_once_in_order_after_outermost_commit": ("unit_of_work",),
    "unit_of_work.callbacks_never_run_after_rollback": ("unit_of_work",),
    "unit_of_work.callbacks_never_run_when_commit_fails": ("unit_of_work",),
    "unit_of_work.exception_rolls_back_claims_and_commits": ("unit_of_work",),
    "unit_of_work.lock_run_holds_the_row_against_claimers": ("paused_claim", "unit_of_work"),
    "unit_of_work.lock_run_outside_transaction_is_refused": ("unit_of_work",),
    "unit_of_work.lock_run_inside_transaction_returns_the_run": ("unit_of_work",),
    "unit_of_work.uncommitted_writes_are_invisible_to_others": ("unit_of_work",),
    # -- keys and payloads --------------------------------------------------------------------
    "keys_and_payloads.run_ids_are_byte_exact": ("start", "some_runs"),
    "keys_and_payloads.idempotency_keys_are_byte_exact": ("start",),
    "keys_and_payloads.dedup_keys_are_byte_exact": ("signal",),
    "keys_and_payloads.operation_keys_are_byte_exact": ("decide", "claim_and_decide"),
    "keys_and_payloads.trailing_spaces_are_significant": ("definition_versions",),
    "keys_and_payloads.long_keys_differing_at_the_end_stay_distinct": ("start", "signal"),
    "keys_and_payloads.json_values_round_trip": ("start", "signal", "big_numbers", "work"),
    "keys_and_payloads.over_long_and_empty_keys_are_refused": ("refused_arguments",),
    "keys_and_payloads.non_json_values_are_refused": ("refused_arguments",),
    "keys_and_payloads.naive_timestamps_are_refused": ("refused_arguments",),
    "keys_and_payloads.microsecond_timestamps_round_trip": ("absolute_times",),
    "keys_and_payloads.non_utc_offsets_are_normalised": ("absolute_times",),
    "keys_and_payloads.returned_timestamps_are_aware_utc": ("absolute_times", "advance", "read_back"),
    "keys_and_payloads.numbers_at_every_boundary_round_trip_at_top_level": ("big_numbers", "start", "signal"),
    "keys_and_payloads.json_deeper_than_the_limit_is_refused_everywhere": ("refused_arguments",),
    "keys_and_payloads.unstorable_text_is_refused_in_every_payload": ("refused_arguments",),
    "keys_and_payloads.unstorable_text_is_refused_as_cancel_reason": ("refused_arguments",),
    "keys_and_payloads.unstorable_text_is_refused_in_every_key_and_name": ("refused_arguments",),
    # -- reached by the steps of kit.machines.reach (a database provisioned for the step, the caller's own
    # objects scribbled over, a payload at the depth limit in a tenant of its own, a write beside a unit)
    "schema.verify_fails_closed_on_absent_schema": ("schema_drift",),
    "schema.failed_migration_is_not_recorded_and_can_be_rerun": ("schema_drift",),
    "schema.concurrent_migrate_applies_each_file_once": ("schema_drift",),
    "keys_and_payloads.json_at_the_depth_limit_reads_back_from_any_stack": ("deep_payload",),
    "keys_and_payloads.mutating_arguments_after_writes_changes_nothing_stored": ("poked_values",),
    "keys_and_payloads.mutating_read_results_changes_nothing_stored": ("poked_values",),
    "unit_of_work.write_beside_an_open_unit_survives_its_commit": ("beside_unit",),
    "unit_of_work.signal_beside_an_open_unit_survives_its_commit": ("beside_unit",),
    # clock_probe also compares the database clock with this host's (within an hour, as the check does)
    "clock.database_clock_reads_server_time": ("clock_probe",),
    # -- the machines themselves ----------------------------------------------------------------
    "machines.fault_machine_agrees_with_reference": ("some_runs",),
    # the reference machine judges the same invariants (kit.machines.invariants) after every step
    "machines.fault_machine_keeps_the_invariants": ("some_runs",),
}

#: check id -> why no machine rule can reach it (the goal is an empty dict; each entry is a stated gap).
UNREACHED: dict[str, str] = {
    "commit.a_fenced_write_judges_its_lease_on_the_clock_after_its_lock_wait": (
        "no rule moves the test clock while a fenced write waits for a run lock another connection holds: the "
        "machines advance the clock between steps, and the reference engine never waits for a lock; the check "
        "stages that wait itself, at a counted statement point"),
}


def all_check_ids() -> list[str]:
    """Every check id of the suite, as reports name them (``area.check_name``)."""
    from kit.conformance import AREAS, check_id

    return [check_id(cls, name) for cls in AREAS for name in vars(cls) if name.startswith("test_")]


def machine_rules() -> set[str]:
    """The names of the state machine's rules (and its initialisers)."""
    from kit.machines.machine import _Machine

    markers = ("hypothesis_stateful_rule", "hypothesis_stateful_initialize_rule")
    return {name for name, member in inspect.getmembers(_Machine) if any(hasattr(member, m) for m in markers)}


def problems(checks: Iterable[str] | None = None, rules: Iterable[str] | None = None) -> list[str]:
    """What is wrong with the map: checks missing from it, ids or rules it names that do not exist."""
    ids = set(all_check_ids() if checks is None else checks)
    known = machine_rules() if rules is None else set(rules)
    found = []
    for check in sorted(ids - set(REACHED_BY) - set(UNREACHED)):
        found.append(f"{check}: not in the coverage map: add it to REACHED_BY (with the rules that reach its "
                     "guarantee) or to UNREACHED (with the reason) in kit/machines/coverage.py")
    for check in sorted((set(REACHED_BY) | set(UNREACHED)) - ids):
        found.append(f"{check}: mapped in kit/machines/coverage.py but no such check exists: remove or rename it")
    for check in sorted(set(REACHED_BY) & set(UNREACHED)):
        found.append(f"{check}: both reached and unreached in kit/machines/coverage.py: keep one")
    for check, names in sorted(REACHED_BY.items()):
        if not names:
            found.append(f"{check}: mapped to no rule: name one, or move it to UNREACHED with the reason")
        for name in names:
            if name not in known:
                found.append(f"{check}: rule {name!r} does not exist in kit/machines/machine.py")
    return found


def unreached() -> dict[str, str]:
    """The guarantees no rule reaches, each with its reason."""
    return dict(sorted(UNREACHED.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kit.machines.coverage",
        description="The conformance checks whose guarantee no fault-machine rule reaches, with the reason.")
    parser.add_argument("--rules", action="store_true", help="also print, per rule, the checks it reaches")
    args = parser.parse_args(argv)
    broken = problems()
    checks = all_check_ids()
    gaps = unreached()
    print(f"{len(checks)} checks: {len(checks) - len(gaps) - len(broken)} reached by a machine rule, "
          f"{len(gaps)} unreached, {len(broken)} problems")
    for check, reason in gaps.items():
        print(f"  unreached  {check}: {reason}")
    for problem in broken:
        print(f"  PROBLEM    {problem}")
    if args.rules:
        by_rule: dict[str, list[str]] = {}
        for check, names in REACHED_BY.items():
            for name in names:
                by_rule.setdefault(name, []).append(check)
        for name in sorted(machine_rules()):
            print(f"{name}: {', '.join(sorted(by_rule.get(name, []))) or '(no check names it)'}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
