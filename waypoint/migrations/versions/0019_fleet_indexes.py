"""Indexes for the fleet's figures over a period (waypoint/store/fleet.py)

- `events_model_calls`: the model calls of a period (answered and failed attempts), by time, with
  their run: the steps a minute and the calls per model key read only this range of the index,
  however long the log of every run grows (partial: other events do not pay for it on insert).
- `runs_waiting`: a tenant's runs waiting for capacity or approval now, without reading its other runs.

Both are built CONCURRENTLY: the events and runs tables stay open to writes while they build.

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Postgres refuses CONCURRENTLY inside a transaction: Alembic commits, runs this block in
    # autocommit, then begins again.
    with op.get_context().autocommit_block():
        op.create_index(
            "events_model_calls",
            "events",
            ["created_at"],
            postgresql_include=["run_id", "kind"],
            postgresql_where=sa.text("kind IN ('model_response', 'model_attempt_failed')"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )
        op.create_index(
            "runs_waiting",
            "runs",
            ["tenant_id", "updated_at"],
            postgresql_where=sa.text("status IN ('waiting_capacity', 'waiting_approval')"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    op.drop_index("runs_waiting", table_name="runs")
    op.drop_index("events_model_calls", table_name="events")
