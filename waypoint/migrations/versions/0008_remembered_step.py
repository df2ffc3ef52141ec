"""runs.remembered_step: the newest step whose episodes are in episodic memory

A step's episodes are stored by the next model call (or, for the last step, when the run ends);
one that could not be stored (Qdrant or its worker away) is picked up by the next call, which
stores every step after this one. Existing runs start at 0: their steps are not stored twice,
since an episode's id comes from (run, step, kind, index).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("remembered_step", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("runs", "remembered_step")
