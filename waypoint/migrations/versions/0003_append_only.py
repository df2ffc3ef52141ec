"""events and checkpoints are append-only: UPDATE and DELETE are refused by a trigger

The one way to remove rows is the retention path (`waypoint delete RUN`), which
sets `waypoint.retention = 'on'` for its own transaction.

Revision ID: 0003
Revises: 0002
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION waypoint_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'DELETE' AND current_setting('waypoint.retention', true) = 'on' THEN
                RETURN OLD;
            END IF;
            RAISE EXCEPTION 'waypoint: % is append-only: % refused (remove a whole run with `waypoint delete`)',
                TG_TABLE_NAME, TG_OP;
        END
        $$
        """
    )
    for table in ("events", "checkpoints"):
        op.execute(
            f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION waypoint_append_only()"
        )


def downgrade() -> None:
    for table in ("events", "checkpoints"):
        op.execute(f"DROP TRIGGER {table}_append_only ON {table}")
    op.execute("DROP FUNCTION waypoint_append_only()")
