"""What DBOS Transact's system database promises, in the kit's vocabulary, and why not the rest.

Read by the DBOS adapter (:mod:`adapters.thirdparty.dbos`), quoted by its
refusals and by the README section on third-party stores.
"""

from __future__ import annotations

from kit.contract.capabilities import Promise

__all__ = ["DBOS_PROMISES", "EXPECTED_FAILURES", "NOT_PROMISED"]

#: What DBOS's system database promises, in the kit's vocabulary. Everything else is
#: withheld, and :data:`NOT_PROMISED` says why (the report quotes it).
DBOS_PROMISES: frozenset[Promise] = frozenset({Promise.GENERATION_FENCING, Promise.SIGNALS})

NOT_PROMISED: dict[Promise, str] = {
    Promise.LEASES: (
        "DBOS ownership has no time bound: a workflow stays with its executor until recovery "
        "declares that executor dead (reenqueue_for_recovery); nothing expires or renews"
    ),
    Promise.EXPECTED_REVISION: (
        "a step is identified by the function_id the replaying workflow computes; DBOS refuses a "
        "function_id recorded twice but has no revision to compare a decision with"
    ),
    Promise.ATOMIC_DECISION: (
        "DBOS checkpoints one step per transaction (record_operation_result, recv_consume, "
        "update_workflow_outcome are separate transactions)"
    ),
    Promise.WAKE_ON_INPUT: (
        "a DBOS workflow waiting for input stays PENDING with its executor (recv waits in memory "
        "and polls); there is no blocked state a store write turns runnable"
    ),
    Promise.COMMANDS: (
        "DBOS runs steps inside the workflow's own process and retries them in memory; the "
        "system database has no separately claimed command queue with attempts and backoff"
    ),
    Promise.TIMERS: (
        "DBOS.sleep records a wake-up time that the sleeping process itself waits for; the system "
        "database has no timers a firer marks due"
    ),
    Promise.DEFINITIONS: (
        "DBOS stores no workflow definitions: the function name travels on the run row and a "
        "restart with another name is refused per workflow id"
    ),
    Promise.CANCEL_REQUESTS: (
        "DBOS cancel_workflows cancels at once (status CANCELLED); there is no request a later "
        "decision sees"
    ),
    Promise.TENANCY: "DBOS has no tenant scope on reads (application_name scopes only dequeues)",
    Promise.UNIT_OF_WORK: "each SystemDatabase call is its own transaction; no caller unit of work",
    Promise.SCHEMA_CHECKSUMS: (
        "DBOS records only its latest migration number (no checksums) and accepts a schema newer "
        "than its code on purpose (a newer peer migrated it)"
    ),
}


#: Checks DBOS is known to fail, each with the finding that explains it (README,
#: docs/findings/). Filled in from the kit's verdict, never to hide a failure.
EXPECTED_FAILURES: dict[str, str] = {
    "commit.event_operation_key_is_unique_per_run": (
        "difference of promise: DBOS identifies a checkpointed step by the function_id the replaying "
        "workflow computes, not by a caller's key; nothing in its system database refuses a key used twice"
    ),
    "keys_and_payloads.json_at_the_depth_limit_reads_back_from_any_stack": (
        "finding: DBOS's JSON codec spends Python stack frames per nesting level (DBOSPortableJSON.serialize "
        "recurses in _serialization._portableify, deserialize_value decodes with json.loads), so a payload "
        "nested to the contract's depth limit (512) is written and read from a shallow caller stack but raises "
        "RecursionError, on write and on read, when the caller has only a few hundred frames left"
    ),
}
