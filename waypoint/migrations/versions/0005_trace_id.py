"""runs.trace_id: indexed, so a trace id from a trace backend finds its run

The column itself came with 0001; `start_run` now fills it with the run's
OpenTelemetry trace id (`waypoint trace RUN` reads it).

Revision ID: 0005
Revises: 0004
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # CONCURRENTLY, so a busy runs table is not locked against writes while the index builds.
    # Postgres refuses it inside a transaction: Alembic commits, runs this block in autocommit,
    # then begins again.
    with op.get_context().autocommit_block():
        op.create_index("runs_trace_id_idx", "runs", ["trace_id"], postgresql_concurrently=True, if_not_exists=True)


def downgrade() -> None:
    op.drop_index("runs_trace_id_idx", table_name="runs")
