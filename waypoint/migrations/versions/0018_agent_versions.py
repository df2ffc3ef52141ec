"""Agent versions: the fingerprint of the agent each run started with, and what was hashed.

`runs.agent_fingerprint` is null for runs started before this migration. `agent_versions` holds
each fingerprint's content per tenant (instructions, tool schemas, model specs, MCP tool names),
so a version can be shown and diffed; the catalog's `agents.fingerprint` is the version a fresh run
would start with on the worker that registered it.

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

NOW = sa.text("now()")
EMPTY_LIST = sa.text("'[]'::jsonb")


def upgrade() -> None:
    op.add_column("runs", sa.Column("agent_fingerprint", sa.Text, nullable=True))
    # Filters take a prefix (`LIKE 'ab12%'`): text_pattern_ops serves it whatever the collation.
    op.create_index(
        "runs_agent_fingerprint",
        "runs",
        ["tenant_id", "agent_fingerprint"],
        postgresql_ops={"agent_fingerprint": "text_pattern_ops"},
        postgresql_where=sa.text("agent_fingerprint IS NOT NULL"),
    )
    op.add_column("agents", sa.Column("fingerprint", sa.Text, nullable=True))
    op.create_table(
        "agent_versions",
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("fingerprint", sa.Text, nullable=False),  # sha256 hex of what follows
        sa.Column("agent", sa.Text, nullable=False),
        sa.Column("instructions", sa.Text, nullable=False),
        sa.Column("tool_schemas", JSONB, nullable=False, server_default=EMPTY_LIST),
        sa.Column("models", JSONB, nullable=False, server_default=EMPTY_LIST),  # model specs, failover order
        sa.Column("mcp_tools", JSONB, nullable=False, server_default=EMPTY_LIST),  # names listed at start
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("tenant_id", "fingerprint", name="agent_versions_pkey"),
    )


def downgrade() -> None:
    op.drop_table("agent_versions")
    op.drop_column("agents", "fingerprint")
    op.drop_index("runs_agent_fingerprint", table_name="runs")
    op.drop_column("runs", "agent_fingerprint")
