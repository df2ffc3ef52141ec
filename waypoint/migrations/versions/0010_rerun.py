"""runs.lineage_kind and runs.batch_id: how a run came from its parent (fork or rerun), and the
batch of reruns it belongs to

Existing forks keep NULL (they were all forks); `waypoint runs --batch` reads batch_id.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("lineage_kind", sa.Text, nullable=True))
    op.add_column("runs", sa.Column("batch_id", sa.Text, nullable=True))
    op.create_index("runs_batch_id_idx", "runs", ["batch_id"], postgresql_where=sa.text("batch_id IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("runs_batch_id_idx", table_name="runs")
    op.drop_column("runs", "batch_id")
    op.drop_column("runs", "lineage_kind")
