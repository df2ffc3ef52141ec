"""SQL views for people: run_steps and tool_calls

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE VIEW run_steps AS
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
               CASE WHEN m.payload->'tool_calls' = '[]'::jsonb THEN m.payload->>'content' END AS answer
          FROM checkpoints c
          JOIN runs r ON r.run_id = c.run_id
          JOIN events m ON m.run_id = c.run_id AND m.step = c.step AND m.kind = 'model_response'
        WINDOW w AS (PARTITION BY c.run_id ORDER BY c.step)
        """
    )
    op.execute(
        """
        CREATE VIEW tool_calls AS
        SELECT e.run_id,
               r.tenant_id,
               r.agent,
               e.step,
               e.payload->>'name' AS tool,
               te.arguments,
               e.payload->>'outcome' AS outcome,
               NOT (e.payload->>'is_error')::boolean AS ok,
               (e.payload->>'duration_ms')::int AS duration_ms,
               COALESCE(te.attempt, 0) AS attempts,
               e.payload->>'idempotency_key' AS idempotency_key,
               e.created_at
          FROM events e
          JOIN runs r ON r.run_id = e.run_id
          LEFT JOIN tool_effects te ON te.idempotency_key = e.payload->>'idempotency_key'
         WHERE e.kind = 'tool_result'
        """
    )


def downgrade() -> None:
    op.execute("DROP VIEW tool_calls")
    op.execute("DROP VIEW run_steps")
