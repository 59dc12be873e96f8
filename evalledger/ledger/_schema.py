"""The ledger's schema and its migrations.

Each migration is one step of ``MIGRATIONS`` and ends by writing its number as
``meta.schema_version``. Opening an older ledger applies the missing steps;
opening a ledger whose version is above ``SCHEMA_VERSION`` is refused, because
this program cannot know what a newer one meant by its tables.

Columns beyond docs/ledger.md: none. Since schema 14 a canonical ``event_id`` is stored
as its 16 bytes and a canonical ``hash`` as its 32 (``_rows``: anything else as its
text). Indexes beyond the UNIQUE ``event_id`` (as the latest migration leaves them;
``seq`` is the rowid, which ends every index entry):

- ``events_by_run_type (run_id, type)``: "events of run R of types T in seq order" is
  one range scan per type, already sorted; a summary never touches ``task.output`` rows.
- ``events_by_run_task (run_id, task_key)``: "events of task K of run R".
- ``events_run_level (type, run_id, seq) WHERE task_key IS NULL``: listing runs and
  finding snapshots without scanning the task events.
- ``events_lifecycle (run_id)``, partial (no output lines, no snapshots): a summary or
  resume rebuild is one range scan in seq order that never reads an output line. (To
  schema 13 it covered every column: it held each lifecycle payload twice.)

Triggers make ``events`` append-only: UPDATE and DELETE abort with
``events are append-only``. Someone can still drop a trigger; the hash chain is
what makes such an edit visible to ``verify``.
"""

from __future__ import annotations

import uuid

from ._events import utc_now
from ._rows import LIFECYCLE_WHERE, LIFECYCLE_WHERE_3, LIFECYCLE_WHERE_6, stored_hash, stored_id
from ._sqlite_utils import Database, Migrations

APPEND_ONLY_MESSAGE = "events are append-only"
TRIGGERS = ("events_no_update", "events_no_delete")

MIGRATIONS = Migrations("evalledger")

# What makes ``events`` append-only (0001 made them; 0014, copying the table, again).
_APPEND_ONLY_TRIGGERS = tuple(
    f"CREATE TRIGGER events_no_{verb.lower()} BEFORE {verb} ON events "
    f"BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE}'); END"
    for verb in ("UPDATE", "DELETE")
)


def _set_version(db: Database, version: int) -> None:
    db.execute(
        "INSERT INTO meta(key, value) VALUES ('schema_version', ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [str(version)],
    )


@MIGRATIONS(name="0001_events")
def _m0001_events(db: Database) -> None:
    # One execute per statement: executescript() would COMMIT the migration's
    # transaction half-way.
    for statement in (
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE events (
            seq       INTEGER PRIMARY KEY,
            event_id  TEXT NOT NULL UNIQUE,
            run_id    TEXT NOT NULL,
            task_key  TEXT,
            type      TEXT NOT NULL,
            ts        TEXT NOT NULL,
            payload   TEXT NOT NULL,
            hash      TEXT NOT NULL
        )""",
        "CREATE INDEX events_by_run_type ON events (run_id, type, seq)",
        "CREATE INDEX events_by_run_task ON events (run_id, task_key, seq)",
        *_APPEND_ONLY_TRIGGERS,
    ):
        db.execute(statement)
    db.execute(
        "INSERT INTO meta(key, value) VALUES ('ledger_id', ?), ('created_at', ?)",
        [str(uuid.uuid4()), utc_now()],
    )
    _set_version(db, 1)


# A released migration's SQL is frozen: verify compares a ledger's schema, as SQL
# text, with what its recorded migrations create. These are the views migrations
# 0002 and 0004 made; 0005 replaces them with VIEWS below.
_VIEWS_4 = {
    "task_attempts": """
        SELECT s.run_id, s.task_key,
               json_extract(s.payload, '$.task_id') AS task_id,
               json_extract(s.payload, '$.variant_id') AS variant_id,
               json_extract(s.payload, '$.replicate_index') AS replicate_index,
               json_extract(s.payload, '$.attempt') AS attempt,
               s.ts AS started_at,
               c.ts AS completed_at,
               json_extract(c.payload, '$.final_status') AS final_status,
               json_extract(c.payload, '$.category') AS category,
               json_extract(c.payload, '$.duration_seconds') AS duration_seconds,
               json_extract(c.payload, '$.tokens.input_tokens') AS input_tokens,
               json_extract(c.payload, '$.tokens.output_tokens') AS output_tokens,
               json_extract(c.payload, '$.cost_usd') AS cost_usd,
               json_extract(c.payload, '$.error_message') AS error_message
        FROM events s
        LEFT JOIN events c
          ON c.seq = (
              SELECT max(d.seq) FROM events d
              WHERE d.run_id = s.run_id AND d.task_key = s.task_key
                AND d.type = 'task.completed'
                AND json_extract(d.payload, '$.attempt') = json_extract(s.payload, '$.attempt'))
        WHERE s.type = 'task.started'
    """,
    "task_results": """
        SELECT a.* FROM task_attempts a
        WHERE a.final_status IS NOT NULL
          AND a.attempt = (
              SELECT max(b.attempt) FROM task_attempts b
              WHERE b.run_id = a.run_id AND b.task_key = a.task_key
                AND b.final_status IS NOT NULL)
    """,
    "runs": """
        SELECT r.run_id,
               json_extract(r.payload, '$.experiment_id') AS experiment_id,
               r.ts AS started_at,
               (SELECT CASE WHEN l.type = 'run.finished' THEN l.ts END
                  FROM events l
                 WHERE l.run_id = r.run_id AND l.task_key IS NULL
                   AND l.type IN ('run.finished', 'run.resumed')
                 ORDER BY l.seq DESC LIMIT 1) AS finished_at,
               COALESCE((SELECT CASE WHEN l.type = 'run.finished'
                                     THEN json_extract(l.payload, '$.status')
                                     ELSE 'running' END
                           FROM events l
                          WHERE l.run_id = r.run_id AND l.task_key IS NULL
                            AND l.type IN ('run.finished', 'run.resumed')
                          ORDER BY l.seq DESC LIMIT 1), 'running') AS status,
               (SELECT count(*) FROM (
                    SELECT j.value FROM events p, json_each(p.payload, '$.planned') j
                     WHERE p.run_id = r.run_id AND p.type = 'run.started'
                    UNION
                    SELECT j.value FROM events p, json_each(p.payload, '$.to_run') j
                     WHERE p.run_id = r.run_id AND p.type = 'run.resumed'
                    UNION
                    SELECT s.task_key FROM events s
                     WHERE s.run_id = r.run_id AND s.type = 'task.started')) AS tasks_planned,
               (SELECT count(*) FROM task_results t
                 WHERE t.run_id = r.run_id AND t.category = 'succeeded') AS tasks_succeeded,
               (SELECT count(*) FROM task_results t
                 WHERE t.run_id = r.run_id AND t.category = 'failed') AS tasks_failed,
               (SELECT count(*) FROM task_results t
                 WHERE t.run_id = r.run_id AND t.category = 'error') AS tasks_error,
               (SELECT COALESCE(sum(json_extract(u.payload, '$.cost_usd')), 0.0) FROM events u
                 WHERE u.run_id = r.run_id AND u.type = 'task.usage') AS cost_usd
        FROM events r
        WHERE r.type = 'run.started' AND r.task_key IS NULL
    """,
}


@MIGRATIONS(name="0002_views")
def _m0002_views(db: Database) -> None:
    # Run-level events only (task_key IS NULL): listing runs without scanning the
    # task events, at no cost to the task-event appends that dominate the log.
    db.execute(
        "CREATE INDEX events_run_level ON events (type, run_id, seq) WHERE task_key IS NULL"
    )
    for name, sql in _VIEWS_4.items():
        db.execute(f"CREATE VIEW {name} AS {sql.strip()}")
    _set_version(db, 2)


@MIGRATIONS(name="0003_lifecycle_index")
def _m0003_lifecycle_index(db: Database) -> None:
    # Lifecycle events (everything but output lines) of a run, in seq order, with
    # every column: a summary or resume rebuild is one index-only range scan that
    # never touches the pages full of task.output rows. Partial, so the output
    # lines that dominate appends pay nothing for it.
    db.execute(
        f"CREATE INDEX IF NOT EXISTS events_lifecycle ON events "
        f"(run_id, seq, type, task_key, ts, event_id, payload, hash) WHERE {LIFECYCLE_WHERE_3}"
    )
    _set_version(db, 3)


def _recreate_views(db: Database, old: dict[str, str], new: dict[str, str]) -> None:
    """Views hold no data: drop the old set (dependents first), create the new one."""
    for name in reversed(list(old)):
        db.execute(f"DROP VIEW IF EXISTS {name}")
    for name, sql in new.items():
        db.execute(f"CREATE VIEW {name} AS {sql.strip()}")


@MIGRATIONS(name="0004_views_latest_completion")
def _m0004_views_latest_completion(db: Database) -> None:
    # task_attempts joins an attempt's last task.completed only: one row per start
    # even when a completion was recorded twice.
    _recreate_views(db, _VIEWS_4, _VIEWS_4)
    _set_version(db, 4)


# The SQL audit interface (docs/ledger.md). Each view equals what the Python projections
# say (property tests hold them together):
# - task_attempts: one row per task.started, joined with its task.completed (the
#   last one, should an attempt have been recorded completed twice, as the fold does);
#   its model is the one the attempt reported using, else the one its task named;
# - task_results: per (run_id, task_key), the latest attempt that reached a final
#   status (the summary's per-task row);
# - runs: one row per run.started; status and finished_at from the latest of
#   run.finished / run.resumed ('running' while a resume is going); cost_usd is
#   the sum of priced task.usage, a floor when some usage had no price
#   (cost_complete says which);
# - usage: one row per task.usage, with the attempt it was reported in.
# Frozen as migration 0005 made them; VIEWS below is the current set.
_VIEWS_5 = {
    "task_attempts": """
        SELECT s.run_id, s.task_key,
               json_extract(s.payload, '$.task_id') AS task_id,
               json_extract(s.payload, '$.variant_id') AS variant_id,
               json_extract(s.payload, '$.replicate_index') AS replicate_index,
               json_extract(s.payload, '$.attempt') AS attempt,
               s.ts AS started_at,
               c.ts AS completed_at,
               json_extract(c.payload, '$.final_status') AS final_status,
               json_extract(c.payload, '$.category') AS category,
               json_extract(c.payload, '$.duration_seconds') AS duration_seconds,
               json_extract(c.payload, '$.tokens.input_tokens') AS input_tokens,
               json_extract(c.payload, '$.tokens.output_tokens') AS output_tokens,
               json_extract(c.payload, '$.cost_usd') AS cost_usd,
               json_extract(c.payload, '$.error_message') AS error_message,
               json_extract(s.payload, '$.tags') AS tags,
               COALESCE(json_extract(c.payload, '$.environment_info.model'),
                        json_extract(s.payload, '$.definition.model')) AS model,
               json_extract(c.payload, '$.tokens.cache_read_tokens') AS cache_read_tokens,
               json_extract(c.payload, '$.tokens.cache_write_tokens') AS cache_write_tokens,
               json_extract(c.payload, '$.weighted_score') AS weighted_score,
               json_extract(c.payload, '$.exit_code') AS exit_code
        FROM events s
        LEFT JOIN events c
          ON c.seq = (
              SELECT max(d.seq) FROM events d
              WHERE d.run_id = s.run_id AND d.task_key = s.task_key
                AND d.type = 'task.completed'
                AND json_extract(d.payload, '$.attempt') = json_extract(s.payload, '$.attempt'))
        WHERE s.type = 'task.started'
    """,
    "task_results": """
        SELECT a.* FROM task_attempts a
        WHERE a.final_status IS NOT NULL
          AND a.attempt = (
              SELECT max(b.attempt) FROM task_attempts b
              WHERE b.run_id = a.run_id AND b.task_key = a.task_key
                AND b.final_status IS NOT NULL)
    """,
    "runs": """
        SELECT r.run_id,
               json_extract(r.payload, '$.experiment_id') AS experiment_id,
               r.ts AS started_at,
               (SELECT CASE WHEN l.type = 'run.finished' THEN l.ts END
                  FROM events l
                 WHERE l.run_id = r.run_id AND l.task_key IS NULL
                   AND l.type IN ('run.finished', 'run.resumed')
                 ORDER BY l.seq DESC LIMIT 1) AS finished_at,
               COALESCE((SELECT CASE WHEN l.type = 'run.finished'
                                     THEN json_extract(l.payload, '$.status')
                                     ELSE 'running' END
                           FROM events l
                          WHERE l.run_id = r.run_id AND l.task_key IS NULL
                            AND l.type IN ('run.finished', 'run.resumed')
                          ORDER BY l.seq DESC LIMIT 1), 'running') AS status,
               (SELECT count(*) FROM (
                    SELECT j.value FROM events p, json_each(p.payload, '$.planned') j
                     WHERE p.run_id = r.run_id AND p.type = 'run.started'
                    UNION
                    SELECT j.value FROM events p, json_each(p.payload, '$.to_run') j
                     WHERE p.run_id = r.run_id AND p.type = 'run.resumed'
                    UNION
                    SELECT s.task_key FROM events s
                     WHERE s.run_id = r.run_id AND s.type = 'task.started')) AS tasks_planned,
               (SELECT count(*) FROM task_results t
                 WHERE t.run_id = r.run_id AND t.category = 'succeeded') AS tasks_succeeded,
               (SELECT count(*) FROM task_results t
                 WHERE t.run_id = r.run_id AND t.category = 'failed') AS tasks_failed,
               (SELECT count(*) FROM task_results t
                 WHERE t.run_id = r.run_id AND t.category = 'error') AS tasks_error,
               (SELECT COALESCE(sum(json_extract(u.payload, '$.cost_usd')), 0.0) FROM events u
                 WHERE u.run_id = r.run_id AND u.type = 'task.usage') AS cost_usd,
               (SELECT count(*) FROM task_results t
                 WHERE t.run_id = r.run_id AND t.category = 'ungraded') AS tasks_ungraded,
               NOT EXISTS (SELECT 1 FROM events u
                            WHERE u.run_id = r.run_id AND u.type = 'task.usage'
                              AND json_extract(u.payload, '$.cost_usd') IS NULL)
                 AS cost_complete
        FROM events r
        WHERE r.type = 'run.started' AND r.task_key IS NULL
    """,
    "usage": """
        SELECT u.run_id, u.task_key,
               (SELECT json_extract(s.payload, '$.attempt') FROM events s
                 WHERE s.run_id = u.run_id AND s.task_key = u.task_key
                   AND s.type = 'task.started' AND s.seq < u.seq
                 ORDER BY s.seq DESC LIMIT 1) AS attempt,
               u.ts,
               json_extract(u.payload, '$.model') AS model,
               json_extract(u.payload, '$.input_tokens') AS input_tokens,
               json_extract(u.payload, '$.output_tokens') AS output_tokens,
               json_extract(u.payload, '$.cache_read_tokens') AS cache_read_tokens,
               json_extract(u.payload, '$.cache_write_tokens') AS cache_write_tokens,
               json_extract(u.payload, '$.cost_usd') AS cost_usd,
               u.seq
        FROM events u
        WHERE u.type = 'task.usage'
    """,
}


@MIGRATIONS(name="0005_audit_views")
def _m0005_audit_views(db: Database) -> None:
    # Columns audits asked for (tags, model, every token kind, score, exit code; ungraded
    # runs, cost completeness; a view of usage).
    _recreate_views(db, _VIEWS_4, _VIEWS_5)
    _set_version(db, 5)


@MIGRATIONS(name="0006_lean_indexes")
def _m0006_lean_indexes(db: Database) -> None:
    # Snapshots stay out of the covering lifecycle index: a summary snapshot of a large
    # run is megabytes, read by kind through events_run_level, never folded.
    db.execute("DROP INDEX events_lifecycle")
    db.execute(
        f"CREATE INDEX events_lifecycle ON events "
        f"(run_id, seq, type, task_key, ts, event_id, payload, hash) WHERE {LIFECYCLE_WHERE_6}"
    )
    # seq is the rowid, and every index entry ends with the rowid: naming seq as a column
    # stored it twice. The same order, in ~8 fewer bytes an event.
    for name, column in (("events_by_run_type", "type"), ("events_by_run_task", "task_key")):
        db.execute(f"DROP INDEX {name}")
        db.execute(f"CREATE INDEX {name} ON events (run_id, {column})")
    _set_version(db, 6)


# The runs view lists a run once though shards of it (run --shard, then merge) each
# recorded a run.started: its row is the first one's. Frozen as migration 0007 made them.
_VIEWS_7 = {
    **_VIEWS_5,
    "runs": _VIEWS_5["runs"].replace(
        "WHERE r.type = 'run.started' AND r.task_key IS NULL",
        "WHERE r.type = 'run.started' AND r.task_key IS NULL\n"
        "          AND NOT EXISTS (SELECT 1 FROM events e WHERE e.run_id = r.run_id\n"
        "                             AND e.type = 'run.started' AND e.task_key IS NULL\n"
        "                             AND e.seq < r.seq)"),
}


@MIGRATIONS(name="0007_one_row_per_run")
def _m0007_one_row_per_run(db: Database) -> None:
    _recreate_views(db, _VIEWS_5, _VIEWS_7)
    _set_version(db, 7)


# Usage by role (task.usage.role: "agent" when left out, "grader" for grading's spend):
# the usage view names each one's role and runs sums grading's apart. A run's cost is
# complete only when no task.completed of it says otherwise either (an imported TIMEOUT
# whose killed turn the old harness never recorded), as the summary counts it. Frozen as
# migration 0008 made them.
_VIEWS_8 = {
    **_VIEWS_7,
    "runs": _VIEWS_7["runs"].replace(
        """                              AND json_extract(u.payload, '$.cost_usd') IS NULL)
                 AS cost_complete
""",
        """                              AND json_extract(u.payload, '$.cost_usd') IS NULL)
               AND NOT EXISTS (SELECT 1 FROM events c
                                WHERE c.run_id = r.run_id AND c.type = 'task.completed'
                                  AND json_extract(c.payload, '$.cost_complete') = 0)
                 AS cost_complete,
               (SELECT COALESCE(sum(json_extract(u.payload, '$.cost_usd')), 0.0) FROM events u
                 WHERE u.run_id = r.run_id AND u.type = 'task.usage'
                   AND json_extract(u.payload, '$.role') = 'grader') AS grader_cost_usd
"""),
    "usage": _VIEWS_7["usage"].replace(
        """               u.seq
""",
        """               u.seq,
               COALESCE(json_extract(u.payload, '$.role'), 'agent') AS role
"""),
}


@MIGRATIONS(name="0008_usage_roles")
def _m0008_usage_roles(db: Database) -> None:
    _recreate_views(db, _VIEWS_7, _VIEWS_8)
    _set_version(db, 8)


# What confined each attempt (its task.isolation: none without one; docs/isolation.md)
# and the hash of the workspace its criteria graded. The lookup goes by (run_id, type):
# a key's own events can be a million output lines, its task.isolation rows are few.
# Frozen as migration 0009 made them.
_VIEWS_9 = {
    **_VIEWS_8,
    "task_attempts": _VIEWS_8["task_attempts"].replace(
        """               json_extract(c.payload, '$.exit_code') AS exit_code
""",
        """               json_extract(c.payload, '$.exit_code') AS exit_code,
               COALESCE((SELECT json_extract(i.payload, '$.backend')
                                || COALESCE(' (asked ' || json_extract(i.payload, '$.asked')
                                            || ')', '')
                           FROM events i INDEXED BY events_by_run_type
                          WHERE i.run_id = s.run_id AND i.type = 'task.isolation'
                            AND i.task_key = s.task_key
                            AND json_extract(i.payload, '$.attempt')
                                = json_extract(s.payload, '$.attempt')
                          ORDER BY i.seq DESC LIMIT 1), 'none') AS isolation,
               json_extract(c.payload, '$.workspace_hash') AS workspace_hash
"""),
}


@MIGRATIONS(name="0009_isolation_columns")
def _m0009_isolation_columns(db: Database) -> None:
    _recreate_views(db, _VIEWS_8, _VIEWS_9)
    _set_version(db, 9)


# Every verdict of a regrade (task.graded), a row each; task_results stays the run's
# own grading (grade set "original"). A grade set's verdict of an attempt is its latest
# row of that set and attempt (docs/results.md, "Grade sets"). And every finding of a
# scan (task.flagged), a row each (docs/results.md, "Flags").
_VIEWS_10 = {
    **_VIEWS_9,
    "task_grades": """
        SELECT g.run_id, g.task_key,
               json_extract(g.payload, '$.grades') AS grades,
               json_extract(g.payload, '$.attempt') AS attempt,
               g.ts AS graded_at,
               json_extract(g.payload, '$.final_status') AS final_status,
               json_extract(g.payload, '$.category') AS category,
               json_extract(g.payload, '$.weighted_score') AS weighted_score,
               json_extract(g.payload, '$.error_message') AS error_message,
               json_extract(g.payload, '$.criteria_from') AS criteria_from,
               json_extract(g.payload, '$.criteria_hash') AS criteria_hash,
               json_extract(g.payload, '$.workspace_hash') AS workspace_hash,
               g.seq
        FROM events g
        WHERE g.type = 'task.graded'
    """,
    "task_flags": """
        SELECT f.run_id, f.task_key,
               json_extract(f.payload, '$.attempt') AS attempt,
               json_extract(f.payload, '$.rule') AS rule,
               json_extract(f.payload, '$.matches') AS matches,
               json_extract(f.payload, '$.evidence[0].seq') AS first_seq,
               json_extract(f.payload, '$.evidence[0].excerpt') AS first_excerpt,
               json_extract(f.payload, '$.why') AS why,
               f.ts AS flagged_at,
               f.seq
        FROM events f
        WHERE f.type = 'task.flagged'
    """,
}


@MIGRATIONS(name="0010_grades_and_flags")
def _m0010_grades_and_flags(db: Database) -> None:
    _recreate_views(db, _VIEWS_9, _VIEWS_10)
    _set_version(db, 10)


def _wilson(succeeded: str, graded: str) -> str:
    """SQL for the 95% Wilson interval's ends of ``succeeded`` of ``graded`` (columns),
    as ``projections._intervals.wilson`` computes them: rounded to 6 places, in [0, 1],
    [0, 1] with nothing graded. Needs SQLite's math functions (``sqrt``: 3.35+)."""
    z2 = f"{_Z95} * {_Z95}"
    p = f"(1.0 * {succeeded} / {graded})"
    shrink = f"(1 + {z2} / {graded})"
    center = f"(({p} + {z2} / (2.0 * {graded})) / {shrink})"
    half = (f"({_Z95} / {shrink} * sqrt({p} * (1 - {p}) / {graded} "
            f"+ {z2} / (4.0 * {graded} * {graded})))")
    return (f"CASE WHEN {graded} > 0 THEN max(0.0, round({center} - {half}, 6)) ELSE 0.0 END "
            f"AS pass_rate_low, "
            f"CASE WHEN {graded} > 0 THEN min(1.0, round({center} + {half}, 6)) ELSE 1.0 END "
            f"AS pass_rate_high")


# z for 95%: statistics.NormalDist().inv_cdf(0.975), as the summary's intervals use.
_Z95 = "1.9599639845400536"

# Each attempt's failure class (docs/results.md, "Failure classes"): as its completion
# recorded it, else its status's (recorded before classes, or imported).
_FAILURE_CLASS = """,
               COALESCE(json_extract(c.payload, '$.failure_class'),
                        CASE WHEN json_extract(c.payload, '$.final_status')
                                  IN ('ERROR', 'BUILD_FAILED', 'STALLED') THEN 'infra'
                             WHEN json_extract(c.payload, '$.final_status')
                                  IN ('FAILURE', 'TIMEOUT', 'MAX_TURNS_EXHAUSTED',
                                      'TOKEN_BUDGET_EXCEEDED', 'COST_BUDGET_EXCEEDED')
                             THEN 'agent' END) AS failure_class
"""

# Pass rates with their 95% Wilson interval, per run and per run and model (the model
# column of `task_results`): succeeded over graded, infrastructure failures left out as
# the summary leaves them (docs/results.md, "How sure a number is"). The run's own
# grading, as those views.
_COUNTED = """sum(category = 'succeeded') AS succeeded,
                     sum(category IN ('succeeded', 'failed')
                         OR (category = 'error' AND failure_class IS NOT 'infra')) AS graded,
                     sum(category = 'error' AND failure_class IS 'infra') AS infra"""
_VIEWS_11 = {
    **_VIEWS_10,
    "task_attempts": _VIEWS_10["task_attempts"].replace(
        """               json_extract(c.payload, '$.workspace_hash') AS workspace_hash
""", """               json_extract(c.payload, '$.workspace_hash') AS workspace_hash"""
        + _FAILURE_CLASS),
    "run_pass_rates": f"""
        SELECT r.run_id, r.experiment_id, COALESCE(t.succeeded, 0) AS succeeded,
               COALESCE(t.graded, 0) AS graded, COALESCE(t.infra, 0) AS infra,
               CASE WHEN t.graded > 0 THEN round(1.0 * t.succeeded / t.graded, 6) END
                 AS pass_rate,
               {_wilson("t.succeeded", "t.graded")}
        FROM runs r LEFT JOIN (SELECT run_id, {_COUNTED} FROM task_results GROUP BY run_id) t
          ON t.run_id = r.run_id
    """,
    "model_pass_rates": f"""
        SELECT run_id, model, succeeded, graded, infra,
               CASE WHEN graded > 0 THEN round(1.0 * succeeded / graded, 6) END AS pass_rate,
               {_wilson("succeeded", "graded")}
        FROM (SELECT run_id, model, {_COUNTED} FROM task_results GROUP BY run_id, model)
    """,
}


@MIGRATIONS(name="0011_pass_rate_intervals")
def _m0011_pass_rate_intervals(db: Database) -> None:
    _recreate_views(db, _VIEWS_10, _VIEWS_11)
    _set_version(db, 11)


@MIGRATIONS(name="0012_packed_snapshots")
def _m0012_packed_snapshots(db: Database) -> None:
    # No table changes: run.snapshot values may be stored packed from here on
    # (_packed.py). An older evalledger would take a packed value for a damaged row
    # (its verify would fail a sound ledger): the version makes it refuse the file,
    # saying to upgrade. Snapshots stored before stay plain; readers take both.
    _set_version(db, 12)


# An estimate (task.usage with estimate: true: an attempt cut off before its agent
# reported its spend) is a floor, priced or not: the run's cost is then not complete, as
# the summary counts it (docs/tasks.md, "Usage and cost").
_VIEWS_13 = {
    **_VIEWS_11,
    "runs": _VIEWS_11["runs"].replace(
        """                              AND json_extract(u.payload, '$.cost_usd') IS NULL)
""", """                              AND (json_extract(u.payload, '$.cost_usd') IS NULL
                                   OR json_extract(u.payload, '$.estimate') = 1))
"""),
}
assert _VIEWS_13["runs"] != _VIEWS_11["runs"]


@MIGRATIONS(name="0013_estimates_are_floors")
def _m0013_estimates_are_floors(db: Database) -> None:
    _recreate_views(db, _VIEWS_11, _VIEWS_13)
    _set_version(db, 13)


_Value = str | bytes | int | float | None


def _stored_id_sql(value: _Value) -> _Value:
    return stored_id(value) if isinstance(value, str) else value


def _stored_hash_sql(value: _Value) -> _Value:
    return stored_hash(value) if isinstance(value, str) else value


@MIGRATIONS(name="0014_binary_envelope")
def _m0014_binary_envelope(db: Database) -> None:
    # The table is copied into its new layout: a canonical event id stored as its 16
    # bytes, a canonical hash as its 32 (_rows.stored_id, stored_hash: any other value
    # stays the text it is, and the chain still hashes the text). The covering lifecycle
    # index held every lifecycle payload a second time (half a no-op run's ledger); a
    # partial index of (run_id) finds the same rows, in seq order, and reads them from
    # the table. Columns declared BLOB take each value as it comes.
    conn = db.conn
    conn.create_function("evalledger_stored_id", 1, _stored_id_sql, deterministic=True)
    conn.create_function("evalledger_stored_hash", 1, _stored_hash_sql, deterministic=True)
    _recreate_views(db, _VIEWS_13, {})  # a view naming the old table would block its drop
    for statement in (
        """CREATE TABLE events_14 (
            seq       INTEGER PRIMARY KEY,
            event_id  BLOB NOT NULL UNIQUE,
            run_id    TEXT NOT NULL,
            task_key  TEXT,
            type      TEXT NOT NULL,
            ts        TEXT NOT NULL,
            payload   TEXT NOT NULL,
            hash      BLOB NOT NULL
        )""",
        "INSERT INTO events_14 (seq, event_id, run_id, task_key, type, ts, payload, hash) "
        "SELECT seq, evalledger_stored_id(event_id), run_id, task_key, type, ts, payload, "
        "evalledger_stored_hash(hash) FROM events ORDER BY seq",
        "DROP TABLE events",
        "ALTER TABLE events_14 RENAME TO events",
        "CREATE INDEX events_by_run_type ON events (run_id, type)",
        "CREATE INDEX events_by_run_task ON events (run_id, task_key)",
        "CREATE INDEX events_run_level ON events (type, run_id, seq) WHERE task_key IS NULL",
        f"CREATE INDEX events_lifecycle ON events (run_id) WHERE {LIFECYCLE_WHERE_6}",
        *_APPEND_ONLY_TRIGGERS,
    ):
        db.execute(statement)
    _recreate_views(db, {}, _VIEWS_13)
    _set_version(db, 14)


def _zero_when_absent(view: str) -> str:
    for kind in ("input", "output", "cache_read", "cache_write"):
        extract = f"json_extract(c.payload, '$.tokens.{kind}_tokens')"
        assert extract in view
        view = view.replace(extract, f"COALESCE({extract}, 0)")
    return view


# A completion whose attempt used no tokens leaves ``tokens`` out (most commands are not
# agents: 90 bytes of zeros a completion); its token columns still read 0, not NULL.
_VIEWS_15 = {**_VIEWS_13, "task_attempts": _zero_when_absent(_VIEWS_13["task_attempts"])}


@MIGRATIONS(name="0015_tokens_left_out_when_none")
def _m0015_tokens_left_out_when_none(db: Database) -> None:
    # Ledgers before it hold explicit zeros: the views read them as before. An older
    # evalledger would read a new completion's tokens as NULL: the version refuses it.
    _recreate_views(db, _VIEWS_13, _VIEWS_15)
    _set_version(db, 15)


def _rates(group: str) -> str:
    """Per ``group`` (``run_id``, or ``run_id, model``), counted from ``task_results``
    as ``_COUNTED`` counts, and what a clustered standard error needs of the task ids
    (``projections._intervals.clustered_stderr``, a task's graded keys its cluster):
    the clusters with a graded key, the most keys of one, and the sums of s², s·n and
    n² over them (s: a task's successes, n: its graded keys)."""
    return f"""SELECT {group}, sum(s) AS succeeded, sum(n) AS graded, sum(i) AS infra,
                   sum(n > 0) AS clusters, max(n) AS most, sum(s * s) AS s2,
                   sum(s * n) AS sn, sum(n * n) AS n2
            FROM (SELECT {group}, task_id, sum(category = 'succeeded') AS s,
                         sum(category IN ('succeeded', 'failed')
                             OR (category = 'error' AND failure_class IS NOT 'infra')) AS n,
                         sum(category = 'error' AND failure_class IS 'infra') AS i
                  FROM task_results GROUP BY {group}, task_id)
            GROUP BY {group}"""


def _interval(t: str) -> str:
    """SQL for a pass rate's 95% interval ends over ``t`` (a ``_rates`` row), as
    ``RunSummary.pass_rate_interval`` gives them: where a task has two graded keys and
    there are two tasks, the normal interval of the rate (rounded to 6 places) with its
    clustered standard error (rounded to 6 places); else Wilson's."""
    p = f"(1.0 * {t}.succeeded / {t}.graded)"
    spread = f"max(0.0, {t}.s2 - 2 * {p} * {t}.sn + {p} * {p} * {t}.n2)"
    se = (f"round(sqrt(1.0 * {t}.clusters / ({t}.clusters - 1) * {spread}) / {t}.graded, 6)")
    rate = f"round({p}, 6)"
    wilson_low, wilson_high = _wilson(f"{t}.succeeded", f"{t}.graded").split(", CASE")
    wilson_low = wilson_low.removesuffix(" AS pass_rate_low")
    wilson_high = "CASE" + wilson_high.removesuffix(" AS pass_rate_high")
    clustered = f"{t}.most >= 2 AND {t}.clusters >= 2"
    return (f"CASE WHEN {clustered} THEN max(0.0, round({rate} - {_Z95} * {se}, 6)) "
            f"ELSE {wilson_low} END AS pass_rate_low, "
            f"CASE WHEN {clustered} THEN min(1.0, round({rate} + {_Z95} * {se}, 6)) "
            f"ELSE {wilson_high} END AS pass_rate_high")


# A pass rate's interval is clustered by task where tasks have replicates (they are not
# independent trials: a Wilson interval over every key held the truth 71.5% of the time),
# as the summary's is (docs/results.md, "How sure a number is").
VIEWS = {
    **_VIEWS_15,
    "run_pass_rates": f"""
        SELECT r.run_id, r.experiment_id, COALESCE(t.succeeded, 0) AS succeeded,
               COALESCE(t.graded, 0) AS graded, COALESCE(t.infra, 0) AS infra,
               CASE WHEN t.graded > 0 THEN round(1.0 * t.succeeded / t.graded, 6) END
                 AS pass_rate,
               {_interval("t")}
        FROM runs r LEFT JOIN ({_rates("run_id")}) t ON t.run_id = r.run_id
    """,
    "model_pass_rates": f"""
        SELECT run_id, model, succeeded, graded, infra,
               CASE WHEN graded > 0 THEN round(1.0 * succeeded / graded, 6) END AS pass_rate,
               {_interval("t")}
        FROM ({_rates("run_id, model")}) t
    """,
}


@MIGRATIONS(name="0016_clustered_pass_rate_intervals")
def _m0016_clustered_pass_rate_intervals(db: Database) -> None:
    _recreate_views(db, _VIEWS_15, VIEWS)
    _set_version(db, 16)


@MIGRATIONS(name="0017_chunked_lines")
def _m0017_chunked_lines(db: Database) -> None:
    # Lines come in chunks from here on (task.lines, _lines): the lifecycle index leaves
    # them out as it does single lines. Older rows stay as they were written (their
    # hashes are history); an older evalledger, which would read a chunk as an unknown
    # event and miss its lines, refuses the file.
    db.execute("DROP INDEX IF EXISTS events_lifecycle")
    db.execute(f"CREATE INDEX events_lifecycle ON events (run_id) WHERE {LIFECYCLE_WHERE}")
    _set_version(db, 17)
