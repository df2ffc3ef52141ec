"""A typed answer on runs: output_json, the run's final answer parsed, for agents with an output_type

`output` keeps the answer's text (the JSON as the run ended with it), as for every run; output_json
holds it as JSONB, so a client reads it typed and SQL can query into it. NULL for text answers.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("output_json", JSONB, nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "output_json")
