"""Sub-agent lineage on runs: the call that started a run (caller run, step and call index) and the
root of its tree

A sub-agent run is a child workflow its caller started with a tool call. These columns are apart
from parent_run_id and fork_step, which say where a fork's earlier steps live: a child's steps are
all its own. root_run_id is the run itself for a run without a caller (set for existing rows), so
a whole tree is one equality.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("caller_run_id", sa.Text, sa.ForeignKey("runs.run_id"), nullable=True))
    op.add_column("runs", sa.Column("caller_step", sa.Integer, nullable=True))
    op.add_column("runs", sa.Column("caller_call_index", sa.Integer, nullable=True))
    op.add_column("runs", sa.Column("root_run_id", sa.Text, nullable=True))
    op.execute("UPDATE runs SET root_run_id = run_id")
    op.create_index(
        "runs_caller_run_id_idx", "runs", ["caller_run_id"], postgresql_where=sa.text("caller_run_id IS NOT NULL")
    )
    op.create_index("runs_root_run_id_idx", "runs", ["root_run_id"])


def downgrade() -> None:
    op.drop_index("runs_root_run_id_idx", table_name="runs")
    op.drop_index("runs_caller_run_id_idx", table_name="runs")
    for column in ("root_run_id", "caller_call_index", "caller_step", "caller_run_id"):
        op.drop_column("runs", column)
