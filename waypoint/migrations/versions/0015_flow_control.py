"""Fleet flow control: a run's priority and the model key it waits for; the shared limiter's leases,
request window, waiting line and per-key health (cooldown after a 429, circuit breaker)

Every worker process takes its model calls' capacity from these tables (waypoint/store/limits.py),
so a limit holds across the fleet. A lease expires unless its worker renews it: a worker that dies
gives its slots back within seconds. The request window keeps the last minute's requests (and their
tokens) per key; older rows are removed as new ones come in.

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

NOW = sa.text("now()")


def upgrade() -> None:
    op.add_column("runs", sa.Column("priority", sa.SmallInteger, nullable=True))
    op.add_column("runs", sa.Column("waiting_key", sa.Text, nullable=True))
    op.create_table(
        "capacity_leases",
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("lease_id", sa.Text, nullable=False),  # run:step: a retried call takes its own lease back
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("granted_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", "lease_id", name="capacity_leases_pkey"),
    )
    op.create_index("capacity_leases_key", "capacity_leases", ["key", "expires_at"])
    op.create_index("capacity_leases_tenant", "capacity_leases", ["tenant_id", "expires_at"])
    op.create_table(
        "capacity_requests",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("lease_id", sa.Text, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("tokens", sa.BigInteger, nullable=False, server_default="0"),
    )
    op.create_index("capacity_requests_key_at", "capacity_requests", ["key", "at"])
    op.create_table(
        "capacity_waiters",
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("lease_id", sa.Text, nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("priority", sa.SmallInteger, nullable=False),
        sa.Column("weight", sa.Float, nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("standby_until", sa.DateTime(timezone=True), nullable=True),  # standing by in its activity
        sa.PrimaryKeyConstraint("key", "lease_id", name="capacity_waiters_pkey"),
    )
    op.create_table(
        "model_key_health",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("cooldown_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cooldown_reason", sa.Text, nullable=True),
        sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_failure_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("breaker_open_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("requests", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("throttled", sa.BigInteger, nullable=False, server_default="0"),  # 429s and 529s
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
    )


def downgrade() -> None:
    op.drop_table("model_key_health")
    op.drop_table("capacity_waiters")
    op.drop_table("capacity_requests")
    op.drop_table("capacity_leases")
    op.drop_column("runs", "waiting_key")
    op.drop_column("runs", "priority")
