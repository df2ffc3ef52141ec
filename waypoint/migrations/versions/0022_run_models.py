"""The models a run is on: after a failover, the one it calls now and every one it has been on.

`runs.model` keeps meaning the model the run started on (a rerun without `--model` starts there
again, with its agent's failover list). `runs.current_model` is the model it calls now and
`runs.models_used` the models it has been on, in order of first use; both are written with each
`model_failover` event, in its transaction, and both stay null while a run never failed over (it is
on `model`, the one model it used).

Runs that failed over before this migration get both from their `model_failover` events (one scan
of the events of that kind).

Revision ID: 0022
Revises: 0021
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

BACKFILL = """
WITH moves AS (
    SELECT run_id, payload->>'to' AS model, seq FROM events WHERE kind = 'model_failover'
), used AS (
    SELECT run_id, model, min(seq) AS first_seq FROM (
        SELECT run_id, model, 0 AS seq FROM runs WHERE run_id IN (SELECT run_id FROM moves)
        UNION ALL
        SELECT run_id, model, seq FROM moves
    ) AS every_model
    GROUP BY run_id, model
)
UPDATE runs SET
    current_model = (SELECT m.model FROM moves m WHERE m.run_id = runs.run_id ORDER BY m.seq DESC LIMIT 1),
    models_used = (SELECT jsonb_agg(u.model ORDER BY u.first_seq) FROM used u WHERE u.run_id = runs.run_id)
WHERE run_id IN (SELECT run_id FROM moves)
"""


def upgrade() -> None:
    op.add_column("runs", sa.Column("current_model", sa.Text, nullable=True))
    op.add_column("runs", sa.Column("models_used", JSONB, nullable=True))
    op.execute(BACKFILL)


def downgrade() -> None:
    op.drop_column("runs", "models_used")
    op.drop_column("runs", "current_model")
