"""agents: the catalog of agents the workers serve, so a run can be checked before it starts

Each worker upserts the agents it loaded when it starts (their instructions, model, tools with
their JSON schemas, limits, and which model providers that worker can call), under the task
queue it polls: workers of other queues are other deployments.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("task_queue", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("providers", JSONB, nullable=False),
        sa.Column("tools", JSONB, nullable=False),
        sa.Column("settings", JSONB, nullable=False),
        sa.Column("worker", sa.Text, nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )


def downgrade() -> None:
    op.drop_table("agents")
