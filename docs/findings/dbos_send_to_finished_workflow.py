"""DBOS accepts a message for a workflow that has already finished, and keeps it forever.

Found by the kit (checks ``signals.terminal_run_rejects_signal``,
``commit.terminal_run_never_changes`` and the model-free fault machine's
invariant 8, "terminal runs never change") against DBOS Transact 3.4.

``DBOS.send`` refuses a destination that does not exist
(``DBOSNonExistentWorkflowError``), but a destination that has completed is
accepted without a word: the message is written to the system database's
``notifications`` table, unconsumed, where no ``recv`` will ever read it. The
sender cannot tell a message delivered to a live workflow from one that is
lost, and the finished workflow's rows keep changing.

Stand-alone: only DBOS's public API writes; the last step reads the system
database file with ``sqlite3`` to show the stored, unconsumed message.

    python docs/findings/dbos_send_to_finished_workflow.py
"""

from __future__ import annotations

import os
import sqlite3
import tempfile

from dbos import DBOS, DBOSConfig, SetWorkflowID
from dbos._error import DBOSNonExistentWorkflowError


def main() -> None:
    folder = tempfile.mkdtemp(prefix="dbos_finding_")
    path = os.path.join(folder, "system.sqlite")
    config: DBOSConfig = {"name": "send-to-finished", "system_database_url": f"sqlite:///{path}"}
    DBOS(config=config)

    @DBOS.workflow()
    def finishes_at_once() -> str:
        return "done"

    DBOS.launch()
    try:
        with SetWorkflowID("finished-1"):
            finishes_at_once()
        status = DBOS.get_workflow_status("finished-1")
        assert status is not None
        print("workflow status:", status.status)  # SUCCESS

        try:
            DBOS.send("no-such-workflow", "hello", topic="t")
        except DBOSNonExistentWorkflowError:
            print("send to a missing workflow: refused (DBOSNonExistentWorkflowError)")

        DBOS.send("finished-1", "too late", topic="t")  # no error, no return value
        print("send to a finished workflow: accepted")
    finally:
        DBOS.destroy()

    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT topic, message, consumed FROM notifications WHERE destination_uuid = 'finished-1'"
        ).fetchall()
    print("stored for the finished workflow:", rows)
    assert rows and not rows[0][2], "expected one stored, unconsumed message"
    print("FINDING: the message was stored for a workflow that will never receive it")


if __name__ == "__main__":
    main()
