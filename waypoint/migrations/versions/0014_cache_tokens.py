"""Prompt-cache tokens: per run, the input tokens the provider's cache served and wrote; per step,
the same in the run_steps view (read from the model_response event's usage)

Summed on runs like input_tokens (one UPDATE with the step), so run lists read them for free. The
view is replaced with two columns added at its end (CREATE OR REPLACE keeps the others as they are).

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

VIEW = """
CREATE OR REPLACE VIEW run_steps AS
SELECT c.run_id,
       r.tenant_id,
       r.agent,
       c.step,
       c.created_at AS recorded_at,
       m.payload->>'model' AS model,
       CASE WHEN jsonb_array_length(m.payload->'tool_calls') > 0 THEN 'tools' ELSE 'answer' END AS action,
       ARRAY(SELECT t->>'name' FROM jsonb_array_elements(m.payload->'tool_calls') AS t) AS tools,
       (m.payload->'usage'->>'input_tokens')::int AS input_tokens,
       (m.payload->'usage'->>'output_tokens')::int AS output_tokens,
       COALESCE((m.payload->>'cost_usd')::numeric, 0) AS cost_usd,
       (m.payload->>'latency_ms')::int AS model_ms,
       (EXTRACT(EPOCH FROM c.created_at - lag(c.created_at) OVER w) * 1000)::int AS duration_ms,
       (SELECT count(*) FROM events f
         WHERE f.run_id = c.run_id AND f.step = c.step AND f.kind = 'model_attempt_failed')::int
           AS model_retries,
       (SELECT count(*) FROM events t
         WHERE t.run_id = c.run_id AND t.step = c.step AND t.kind = 'tool_result'
           AND (t.payload->>'is_error')::boolean)::int AS tool_errors,
       (SELECT COALESCE(sum((t.payload->>'duration_ms')::int), 0) FROM events t
         WHERE t.run_id = c.run_id AND t.step = c.step AND t.kind = 'tool_result')::int AS tools_ms,
       CASE WHEN m.payload->'tool_calls' = '[]'::jsonb THEN m.payload->>'content' END AS answer{extra}
  FROM checkpoints c
  JOIN runs r ON r.run_id = c.run_id
  JOIN events m ON m.run_id = c.run_id AND m.step = c.step AND m.kind = 'model_response'
WINDOW w AS (PARTITION BY c.run_id ORDER BY c.step)
"""

CACHE_COLUMNS = """,
       COALESCE((m.payload->'usage'->>'cache_read_tokens')::int, 0) AS cache_read_tokens,
       COALESCE((m.payload->'usage'->>'cache_write_tokens')::int, 0) AS cache_write_tokens"""


def upgrade() -> None:
    op.add_column("runs", sa.Column("cache_read_tokens", sa.BigInteger, nullable=False, server_default="0"))
    op.add_column("runs", sa.Column("cache_write_tokens", sa.BigInteger, nullable=False, server_default="0"))
    op.execute(VIEW.format(extra=CACHE_COLUMNS))


def downgrade() -> None:
    # A view cannot lose columns with CREATE OR REPLACE: drop it and make 0004's again.
    op.execute("DROP VIEW run_steps")
    op.execute(f"CREATE VIEW {VIEW.strip().removeprefix('CREATE OR REPLACE VIEW ').format(extra='')}")
    op.drop_column("runs", "cache_write_tokens")
    op.drop_column("runs", "cache_read_tokens")
