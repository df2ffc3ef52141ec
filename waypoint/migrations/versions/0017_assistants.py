"""Agent Protocol assistants: a tenant's configured agents (a graph, i.e. an agent of the catalog,
with config and context), every version of each, and the assistant version a run ran.

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

NOW = sa.text("now()")
EMPTY = sa.text("'{}'::jsonb")


def upgrade() -> None:
    op.create_table(
        "assistants",
        sa.Column("assistant_id", sa.Text, primary_key=True),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("graph_id", sa.Text, nullable=False),  # an agent of the catalog
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=True),
        sa.Column("metadata", JSONB, nullable=False, server_default=EMPTY),
        sa.Column("version", sa.Integer, nullable=False),  # the current (latest) version
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
    )
    op.create_index("assistants_tenant", "assistants", ["tenant_id", "created_at"])
    op.create_table(
        "assistant_versions",
        sa.Column(
            "assistant_id", sa.Text, sa.ForeignKey("assistants.assistant_id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("graph_id", sa.Text, nullable=False),
        sa.Column("config", JSONB, nullable=False, server_default=EMPTY),
        sa.Column("context", JSONB, nullable=False, server_default=EMPTY),
        sa.Column("metadata", JSONB, nullable=False, server_default=EMPTY),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("assistant_id", "version", name="assistant_versions_pkey"),
    )
    op.add_column("runs", sa.Column("assistant_id", sa.Text, nullable=True))
    op.add_column("runs", sa.Column("assistant_version", sa.Integer, nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "assistant_version")
    op.drop_column("runs", "assistant_id")
    op.drop_table("assistant_versions")
    op.drop_table("assistants")
