"""The multitask strategy each run of an Agent Protocol thread was created with (reject, enqueue,
interrupt, rollback): the protocol's run answers it, as it was asked for, for the run's life.

Revision ID: 0024
Revises: 0023
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL: a run from before this column, or one that joined its thread otherwise (a cron's): reject.
    op.add_column("thread_runs", sa.Column("multitask_strategy", sa.Text, nullable=True))


def downgrade() -> None:
    op.drop_column("thread_runs", "multitask_strategy")
