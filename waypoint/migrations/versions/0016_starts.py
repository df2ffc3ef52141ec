"""Runs that start themselves and answer back: the schedule a run was fired by, a start time (a
delayed run) or the run it waits for (a thread's enqueued run), its webhook; the schedules
themselves (tenant-scoped; Temporal holds their state), each tenant's webhook signing secret, every
webhook delivery attempt, and the idempotency keys of starts.

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

NOW = sa.text("now()")


def upgrade() -> None:
    op.add_column("runs", sa.Column("schedule_id", sa.Text, nullable=True))
    op.add_column("runs", sa.Column("start_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("runs", sa.Column("after_run_id", sa.Text, nullable=True))
    op.add_column("runs", sa.Column("webhook", sa.Text, nullable=True))
    op.create_index(
        "runs_schedule",
        "runs",
        ["tenant_id", "schedule_id", "created_at"],
        postgresql_where=sa.text("schedule_id IS NOT NULL"),
    )
    op.create_table(
        "schedules",
        sa.Column("schedule_id", sa.Text, primary_key=True),  # = the Temporal Schedule's id
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("agent", sa.Text, nullable=False),
        sa.Column("task", sa.Text, nullable=False),
        sa.Column("thread_id", sa.Text, nullable=True),  # an Agent Protocol cron on a thread
        sa.Column("spec", JSONB, nullable=False),  # how it was asked for: cron/every, zone, policies, run options
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
    )
    op.create_index("schedules_tenant", "schedules", ["tenant_id", "created_at"])
    op.create_table(
        "webhook_secrets",
        sa.Column("tenant_id", sa.Text, primary_key=True),
        sa.Column("secret", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
    )
    op.create_table(
        "webhook_attempts",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("status_code", sa.Integer, nullable=True),  # None: no answer (refused, timed out)
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("duration_ms", sa.Integer, nullable=False, server_default="0"),
        sa.Column("delivered", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.create_index("webhook_attempts_run", "webhook_attempts", ["run_id", "id"])
    op.create_table(
        "idempotency_keys",
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("body_hash", sa.Text, nullable=False),  # of the start's parameters: a reuse must match
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("tenant_id", "key", name="idempotency_keys_pkey"),
    )
    op.create_index("idempotency_keys_created", "idempotency_keys", ["created_at"])


def downgrade() -> None:
    op.drop_table("idempotency_keys")
    op.drop_table("webhook_attempts")
    op.drop_table("webhook_secrets")
    op.drop_table("schedules")
    op.drop_index("runs_schedule", table_name="runs")
    for column in ("webhook", "after_run_id", "start_at", "schedule_id"):
        op.drop_column("runs", column)
