"""compactions: what each compaction of a run's range summarized, pinned and pruned

Append-only like the event log (same trigger); rows leave only with their run
(`waypoint delete`, through ON DELETE CASCADE inside its retention transaction).

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "compactions",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("run_id", sa.Text, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("first_seq", sa.Integer, nullable=False),
        sa.Column("last_seq", sa.Integer, nullable=False),
        sa.Column("first_step", sa.Integer, nullable=False),
        sa.Column("last_step", sa.Integer, nullable=False),
        sa.Column("tokens_before", sa.Integer, nullable=False),
        sa.Column("tokens_after", sa.Integer, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("structured", JSONB, nullable=False),
        sa.Column("pinned", JSONB, nullable=False),
        sa.Column("pruned", JSONB, nullable=False),
        sa.Column("method", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=True),
        sa.Column("fallback_reason", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.UniqueConstraint("run_id", "first_seq", "last_seq", name="compactions_run_range_key"),
        sa.CheckConstraint("first_seq <= last_seq", name="compactions_range_check"),
    )
    op.create_index("compactions_run_last_seq_idx", "compactions", ["run_id", "last_seq"])
    op.execute(
        "CREATE TRIGGER compactions_append_only BEFORE UPDATE OR DELETE ON compactions "
        "FOR EACH ROW EXECUTE FUNCTION waypoint_append_only()"
    )


def downgrade() -> None:
    op.drop_table("compactions")
