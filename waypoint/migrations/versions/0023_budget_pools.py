"""Budget pools: one per tree of runs, and one per tenant and UTC day; each model call's reservation

A tree's token, cost and step budgets are one pool (`budget_pools`, keyed by the root run) that every
run of the tree draws from: a model call reserves what it may spend before it goes out and settles
what it spent when it returns (waypoint/store/budget.py). A tenant's daily budget is counted the same
way in `budget_tenant_days`. `budget_reservations` holds the calls in flight, one row per (run, step)
so a retried attempt replaces its own; a row expires after its call's timeout, so a reservation whose
worker died and whose run never came back is not held for ever. What is reserved is the sum of a
pool's rows (never a counter that could drift), read under the pool's row lock.

The two functions are the hot path: one round trip to reserve, one to settle.

Revision ID: 0023
Revises: 0022
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

NOW = sa.text("now()")
NONE = sa.text("'{}'::text[]")
MONEY = sa.Numeric(20, 10)

# What a model call may reserve: the first budget it does not fit decides (tree before tenant day).
# Per measure, `need` is what the call takes before any output (its input, its input's cost, one
# step) and `per_out` what each output token adds. A measure with output (tokens, cost) cuts the
# call's max_tokens to the room left; without room for `p_min_output` tokens it waits when the calls
# in flight hold that room (they settle, or expire), and is refused when what was spent holds it.
RESERVE = """
CREATE FUNCTION waypoint_budget_reserve(
    p_run text, p_step integer, p_attempt integer, p_tenant text, p_pool text,
    p_day_tokens bigint, p_day_cost numeric, p_day_wait boolean,
    p_input bigint, p_max_output bigint, p_min_output bigint,
    p_in_price numeric, p_out_price numeric, p_lease_seconds double precision
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    t_now timestamptz := clock_timestamp();
    v_pool budget_pools%ROWTYPE;
    spent budget_tenant_days%ROWTYPE;
    today date;
    in_cost numeric := p_input * p_in_price;
    out_tokens bigint := p_max_output;
    pool_tokens bigint := 0;
    pool_cost numeric := 0;
    pool_steps bigint := 0;
    day_tokens bigint := 0;
    day_cost numeric := 0;
    outcome text := 'granted';
    blocked jsonb;
    c record;
    room numeric;
    fits_now boolean;
    fits_later boolean;
    v_waiting text[];
BEGIN
    IF p_pool IS NOT NULL THEN
        SELECT * INTO v_pool FROM budget_pools WHERE root_run_id = p_pool FOR UPDATE;
        IF NOT FOUND THEN
            p_pool := NULL;
        END IF;
    END IF;
    IF p_day_tokens IS NOT NULL OR p_day_cost IS NOT NULL THEN
        today := (t_now AT TIME ZONE 'UTC')::date;
        INSERT INTO budget_tenant_days (tenant_id, day) VALUES (p_tenant, today) ON CONFLICT DO NOTHING;
        SELECT * INTO spent FROM budget_tenant_days WHERE tenant_id = p_tenant AND day = today FOR UPDATE;
    END IF;
    -- A retried attempt replaces its call's reservation; expired ones are gone (their worker died).
    DELETE FROM budget_reservations WHERE run_id = p_run AND step = p_step;
    IF p_pool IS NOT NULL THEN
        DELETE FROM budget_reservations WHERE pool = p_pool AND expires_at <= t_now;
        SELECT coalesce(sum(r.tokens), 0), coalesce(sum(r.cost_usd), 0), coalesce(sum(r.steps), 0)
          INTO pool_tokens, pool_cost, pool_steps
          FROM budget_reservations r WHERE r.pool = p_pool;
    END IF;
    IF today IS NOT NULL THEN
        DELETE FROM budget_reservations
         WHERE tenant_id = p_tenant AND day = today AND pool IS NULL AND expires_at <= t_now;
        SELECT coalesce(sum(r.tokens), 0), coalesce(sum(r.cost_usd), 0) INTO day_tokens, day_cost
          FROM budget_reservations r WHERE r.tenant_id = p_tenant AND r.day = today AND r.expires_at > t_now;
    END IF;
    FOR c IN
        SELECT * FROM (VALUES
            (1, 'tree', 'tokens', v_pool.max_tokens::numeric, v_pool.used_tokens::numeric, pool_tokens::numeric,
             p_input::numeric, 1::numeric),
            (2, 'tree', 'cost_usd', v_pool.max_cost_usd, v_pool.used_cost_usd, pool_cost, in_cost, p_out_price),
            (3, 'tree', 'steps', v_pool.max_steps::numeric, v_pool.used_steps::numeric, pool_steps::numeric,
             1::numeric, 0::numeric),
            (4, 'tenant_day', 'tokens', p_day_tokens::numeric, spent.used_tokens::numeric, day_tokens::numeric,
             p_input::numeric, 1::numeric),
            (5, 'tenant_day', 'cost_usd', p_day_cost, spent.used_cost_usd, day_cost, in_cost, p_out_price)
        ) AS v(n, scope, measure, cap, used, reserved, need, per_out)
        WHERE v.cap IS NOT NULL ORDER BY v.n
    LOOP
        IF c.per_out > 0 THEN
            room := floor((c.cap - c.used - c.reserved - c.need) / c.per_out);
            fits_now := room >= p_min_output;
            fits_later := floor((c.cap - c.used - c.need) / c.per_out) >= p_min_output;
        ELSE
            room := NULL;
            fits_now := c.used + c.reserved + c.need <= c.cap AND c.used + c.reserved < c.cap;
            fits_later := c.used + c.need <= c.cap AND c.used < c.cap;
        END IF;
        IF NOT fits_now THEN
            IF NOT fits_later OR outcome = 'granted' THEN
                blocked := jsonb_build_object(
                    'scope', c.scope, 'measure', c.measure, 'limit', c.cap, 'used', c.used,
                    'reserved', c.reserved, 'needed', c.need + p_min_output * c.per_out, 'spent', NOT fits_later);
            END IF;
            IF NOT fits_later THEN
                outcome := CASE WHEN c.scope = 'tenant_day' AND p_day_wait THEN 'wait' ELSE 'exceeded' END;
                EXIT;
            END IF;
            outcome := 'wait';
        ELSIF room IS NOT NULL THEN
            out_tokens := least(out_tokens, room::bigint);
        END IF;
    END LOOP;
    IF outcome = 'granted' THEN
        INSERT INTO budget_reservations
            (run_id, step, attempt, pool, tenant_id, day, tokens, output_tokens, cost_usd, steps, expires_at)
        VALUES (p_run, p_step, p_attempt, p_pool, p_tenant, today, p_input + out_tokens, out_tokens,
                in_cost + out_tokens * p_out_price, CASE WHEN p_pool IS NULL THEN 0 ELSE 1 END,
                t_now + make_interval(secs => p_lease_seconds));
    ELSIF outcome = 'wait' THEN
        -- The next settle of what blocks it wakes it (a `capacity` signal); its timer is the backstop.
        IF blocked->>'scope' = 'tree' THEN
            UPDATE budget_pools SET waiting = array_append(array_remove(budget_pools.waiting, p_run), p_run)
             WHERE root_run_id = p_pool RETURNING budget_pools.waiting INTO v_waiting;
        ELSE
            UPDATE budget_tenant_days
               SET waiting = array_append(array_remove(budget_tenant_days.waiting, p_run), p_run)
             WHERE tenant_id = p_tenant AND day = today RETURNING budget_tenant_days.waiting INTO v_waiting;
        END IF;
        blocked := blocked || jsonb_build_object('position', array_position(v_waiting, p_run));
    END IF;
    RETURN jsonb_build_object(
        'outcome', outcome,
        'output_tokens', out_tokens,
        'tokens', p_input + out_tokens,
        'cost_usd', in_cost + out_tokens * p_out_price,
        'day', today,
        'blocked', blocked,
        'pool', CASE WHEN p_pool IS NULL THEN NULL ELSE jsonb_build_object(
            'max_tokens', v_pool.max_tokens, 'used_tokens', v_pool.used_tokens, 'reserved_tokens', pool_tokens,
            'max_cost_usd', v_pool.max_cost_usd, 'used_cost_usd', v_pool.used_cost_usd, 'reserved_cost_usd', pool_cost,
            'max_steps', v_pool.max_steps, 'used_steps', v_pool.used_steps, 'reserved_steps', pool_steps) END);
END
$$
"""

# A call's end: what it spent goes on its pool and its tenant's day (the day it reserved on), its
# reservation goes, and the runs that waited on either are returned, to be woken.
SETTLE = """
CREATE FUNCTION waypoint_budget_settle(
    p_run text, p_step integer, p_attempt integer, p_pool text, p_tenant text, p_day date,
    p_tokens bigint, p_cost numeric, p_steps integer
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    woken text[] := '{}';
    found_waiting text[];
BEGIN
    IF p_pool IS NOT NULL THEN
        SELECT waiting INTO found_waiting FROM budget_pools WHERE root_run_id = p_pool FOR UPDATE;
        IF FOUND THEN
            UPDATE budget_pools
               SET used_tokens = used_tokens + p_tokens, used_cost_usd = used_cost_usd + p_cost,
                   used_steps = used_steps + p_steps, waiting = '{}', updated_at = clock_timestamp()
             WHERE root_run_id = p_pool;
            woken := woken || found_waiting;
        END IF;
    END IF;
    IF p_day IS NOT NULL THEN
        INSERT INTO budget_tenant_days (tenant_id, day) VALUES (p_tenant, p_day) ON CONFLICT DO NOTHING;
        SELECT waiting INTO found_waiting FROM budget_tenant_days WHERE tenant_id = p_tenant AND day = p_day FOR UPDATE;
        UPDATE budget_tenant_days
           SET used_tokens = used_tokens + p_tokens, used_cost_usd = used_cost_usd + p_cost, waiting = '{}',
               updated_at = clock_timestamp()
         WHERE tenant_id = p_tenant AND day = p_day;
        woken := woken || found_waiting;
    END IF;
    DELETE FROM budget_reservations WHERE run_id = p_run AND step = p_step AND attempt = p_attempt;
    RETURN coalesce((SELECT array_agg(DISTINCT w) FROM unnest(woken) AS w WHERE w <> p_run), '{}');
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "budget_pools",
        sa.Column("root_run_id", sa.Text, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("max_tokens", sa.BigInteger, nullable=True),
        sa.Column("max_cost_usd", MONEY, nullable=True),
        sa.Column("max_steps", sa.Integer, nullable=True),
        sa.Column("used_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("used_cost_usd", MONEY, nullable=False, server_default="0"),
        sa.Column("used_steps", sa.Integer, nullable=False, server_default="0"),
        sa.Column("waiting", ARRAY(sa.Text), nullable=False, server_default=NONE),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
    )
    op.create_table(
        "budget_tenant_days",
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("day", sa.Date, nullable=False),
        sa.Column("used_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("used_cost_usd", MONEY, nullable=False, server_default="0"),
        sa.Column("waiting", ARRAY(sa.Text), nullable=False, server_default=NONE),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("tenant_id", "day", name="budget_tenant_days_pkey"),
    )
    op.create_table(
        "budget_reservations",
        sa.Column("run_id", sa.Text, sa.ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("pool", sa.Text, sa.ForeignKey("budget_pools.root_run_id", ondelete="CASCADE"), nullable=True),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("day", sa.Date, nullable=True),  # the tenant's day it counts against (None: no daily budget)
        sa.Column("tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),  # the call's max_tokens
        sa.Column("cost_usd", MONEY, nullable=False),
        sa.Column("steps", sa.Integer, nullable=False),
        sa.Column("reserved_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "step", name="budget_reservations_pkey"),
    )
    op.create_index(
        "budget_reservations_pool", "budget_reservations", ["pool"], postgresql_where=sa.text("pool IS NOT NULL")
    )
    op.create_index(
        "budget_reservations_day",
        "budget_reservations",
        ["tenant_id", "day"],
        postgresql_where=sa.text("day IS NOT NULL"),
    )
    op.execute(RESERVE)
    op.execute(SETTLE)


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION waypoint_budget_settle(text, integer, integer, text, text, date, bigint, numeric, integer)"
    )
    op.execute(
        "DROP FUNCTION waypoint_budget_reserve(text, integer, integer, text, text, bigint, numeric, boolean, "
        "bigint, bigint, bigint, numeric, numeric, double precision)"
    )
    op.drop_table("budget_reservations")
    op.drop_table("budget_tenant_days")
    op.drop_table("budget_pools")
