"""recalled_texts: the recalled-memory message a model call received, kept once per run and text

The model activity used to return this text (about 2 KB a step with five recalled episodes) to
the workflow, so it landed in Temporal's history on every step. The activity now writes it here,
keyed by its SHA-256, and the step's record names it by that hash; `show` and `verify` rebuild
the exact request from it. Rows go with their run (`waypoint delete`).

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "recalled_texts",
        sa.Column("run_id", sa.Text, sa.ForeignKey("runs.run_id"), nullable=False),
        sa.Column("sha256", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("run_id", "sha256", name="recalled_texts_pkey"),
    )


def downgrade() -> None:
    op.drop_table("recalled_texts")
