"""runs, events and checkpoints

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("run_id", sa.Text, primary_key=True),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("agent", sa.Text, nullable=False),
        sa.Column("task", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("parent_run_id", sa.Text, sa.ForeignKey("runs.run_id"), nullable=True),
        sa.Column("fork_step", sa.Integer, nullable=True),
        sa.Column("max_steps", sa.Integer, nullable=False),
        sa.Column("steps", sa.Integer, nullable=False, server_default="0"),
        sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("cost_usd", sa.Numeric(14, 6), nullable=False, server_default="0"),
        sa.Column("output", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("trace_id", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("runs_tenant_created_idx", "runs", ["tenant_id", sa.text("created_at DESC")])

    op.create_table(
        "events",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("run_id", sa.Text, sa.ForeignKey("runs.run_id"), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("payload", JSONB, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False, server_default="1"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("prev_hash", sa.Text, nullable=True),
        sa.Column("hash", sa.Text, nullable=False),
        sa.UniqueConstraint("run_id", "seq", name="events_run_seq_key"),
    )
    op.create_index("events_run_step_idx", "events", ["run_id", "step"])
    op.create_index("events_created_idx", "events", ["created_at"])

    op.create_table(
        "checkpoints",
        sa.Column("run_id", sa.Text, sa.ForeignKey("runs.run_id"), nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("state", JSONB, nullable=False),
        sa.Column("last_event_seq", sa.Integer, nullable=False),
        sa.Column("state_hash", sa.Text, nullable=False),
        sa.Column("schema_version", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("run_id", "step", name="checkpoints_pkey"),
    )


def downgrade() -> None:
    op.drop_table("checkpoints")
    op.drop_table("events")
    op.drop_table("runs")
