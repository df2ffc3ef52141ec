"""An index for the fleet's figures (waypoint/store/fleet.py): a tenant's waiting runs

`runs_waiting`: the tenant's runs waiting for capacity or approval now, read without its other runs
(the fleet page lists them at every load; without it, every run the tenant ever had is read for its
status). The period's other figures read `runs_tenant_created_idx` and `events_created_idx`: a
partial index of the model-call events alone measured no faster on the fleet benchmark (10,000 runs:
p50 102-111 ms without it, 113-138 ms with it) and would cost every model event's insert a write.

Built CONCURRENTLY: the runs table stays open to writes while it builds.

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
            "runs_waiting",
            "runs",
            ["tenant_id", "updated_at"],
            postgresql_where=sa.text("status IN ('waiting_capacity', 'waiting_approval')"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    op.drop_index("runs_waiting", table_name="runs")
