"""Webhook deliveries: one row per delivery (a run's end to its webhook, or a redelivery of one),
retried by a workflow of its own until delivered or its retry window ends; `failed` rows are the
dead-letter list. Each attempt row names its delivery.

Revision ID: 0021
Revises: 0020
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

NOW = sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "webhook_deliveries",
        sa.Column("delivery_id", sa.Text, primary_key=True),  # = its workflow's id
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),  # posted byte for byte by every attempt
        sa.Column("status", sa.Text, nullable=False, server_default="pending"),  # pending, delivered, failed
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_status_code", sa.Integer, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("window_ends_at", sa.DateTime(timezone=True), nullable=True),  # set when its workflow opens it
        sa.Column("redelivery_of", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("webhook_deliveries_tenant", "webhook_deliveries", ["tenant_id", "created_at"])
    # The dead-letter list: a tenant's failed deliveries, newest first, without reading the others.
    op.create_index(
        "webhook_deliveries_failed",
        "webhook_deliveries",
        ["tenant_id", "created_at"],
        postgresql_where=sa.text("status = 'failed'"),
    )
    op.create_index("webhook_deliveries_run", "webhook_deliveries", ["run_id"])
    op.add_column("webhook_attempts", sa.Column("delivery_id", sa.Text, nullable=True))
    op.create_index(
        "webhook_attempts_delivery",
        "webhook_attempts",
        ["delivery_id", "id"],
        postgresql_where=sa.text("delivery_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("webhook_attempts_delivery", table_name="webhook_attempts")
    op.drop_column("webhook_attempts", "delivery_id")
    op.drop_table("webhook_deliveries")
