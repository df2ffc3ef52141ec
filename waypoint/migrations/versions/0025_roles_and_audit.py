"""Roles on API keys, and the audit log (issue 44).

`api_keys.role`: what a key may do (viewer, operator, admin; `waypoint.access.Role`). Keys from
before this column keep what they could do: admin.

`audit_log`: every human or application action, one row per action, append-only, tenant-scoped and
hash-chained per tenant like a run's events (`seq` 1, 2, 3... per tenant; `hash` = sha256 of the
previous entry's hash and the canonical JSON of this one), so an edited or deleted row is found by
`waypoint audit --verify`. Nothing secret is written: the actor is `key:<id>`, `user:<subject>` or
`local`.

Revision ID: 0025
Revises: 0024
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("role", sa.Text, nullable=False, server_default="admin"))
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("actor", sa.Text, nullable=False),
        sa.Column("role", sa.Text, nullable=False),
        sa.Column("surface", sa.Text, nullable=False),
        sa.Column("address", sa.Text, nullable=True),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("target_kind", sa.Text, nullable=True),
        sa.Column("target_id", sa.Text, nullable=True),
        sa.Column("outcome", sa.Text, nullable=False),
        sa.Column("detail", JSONB, nullable=True),
        sa.Column("prev_hash", sa.Text, nullable=True),
        sa.Column("hash", sa.Text, nullable=False),
        sa.UniqueConstraint("tenant_id", "seq", name="audit_log_tenant_seq_key"),
    )
    op.create_index("audit_log_tenant_actor", "audit_log", ["tenant_id", "actor", "seq"])
    op.create_index("audit_log_tenant_at", "audit_log", ["tenant_id", "at"])


def downgrade() -> None:
    op.drop_table("audit_log")
    op.drop_column("api_keys", "role")
