"""HTTP API: API keys, Agent Protocol threads, and notifications of new events

- `api_keys`: one row per key, stored as its SHA-256 (the key itself is shown once, at
  creation); the tenant a request acts for comes from its key, never from the request.
- `threads` and `thread_runs`: an Agent Protocol thread is a chain of runs, each forked from the
  previous one's last step; `thread_runs` orders them (a copied thread shares its runs).
- A statement-level trigger on `events` sends `NOTIFY waypoint_events, '<run_id> <last seq> <last step>'`
  once per run per INSERT statement, delivered at commit: the API streams a run's log as it
  commits, reading the rows themselves from the table (the notification carries no payload).

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("key_hash", sa.Text, nullable=False, unique=True),
        sa.Column("prefix", sa.Text, nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "threads",
        sa.Column("thread_id", sa.Text, primary_key=True),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("metadata", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_index("threads_tenant_idx", "threads", ["tenant_id", "created_at"])
    op.create_table(
        "thread_runs",
        sa.Column("thread_id", sa.Text, sa.ForeignKey("threads.thread_id", ondelete="CASCADE"), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("thread_id", "position", name="thread_runs_pkey"),
    )
    op.create_index("thread_runs_run_idx", "thread_runs", ["run_id"])
    op.execute(
        """
        CREATE FUNCTION waypoint_notify_events() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('waypoint_events', run_id || ' ' || max(seq) || ' ' || max(step))
            FROM new_events GROUP BY run_id;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        "CREATE TRIGGER events_notify AFTER INSERT ON events REFERENCING NEW TABLE AS new_events "
        "FOR EACH STATEMENT EXECUTE FUNCTION waypoint_notify_events()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER events_notify ON events")
    op.execute("DROP FUNCTION waypoint_notify_events()")
    op.drop_table("thread_runs")
    op.drop_table("threads")
    op.drop_table("api_keys")
