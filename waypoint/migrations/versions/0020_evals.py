"""Evaluations: datasets (versioned, with their cases), experiments, each case's result, the judge's
recorded verdicts and the scorers workers registered.

A dataset version is written once and never changed (a new `dataset create` of the same name is the
next version). An experiment's results cascade with it; a judge's verdict with its run (deleting a
run deletes what was said of it); a result keeps its row when its run is deleted, without the id.

Revision ID: 0020
Revises: 0019
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

NOW = sa.text("now()")
EMPTY = sa.text("'{}'::jsonb")


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("source", JSONB, nullable=False),
        sa.Column("cases", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("tenant_id", "name", "version", name="datasets_pkey"),
    )
    op.create_table(
        "dataset_cases",
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("dataset", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("case_id", sa.Text, nullable=False),
        sa.Column("task", sa.Text, nullable=False),
        sa.Column("expected_output", JSONB, nullable=True),
        sa.Column("expected_tools", JSONB, nullable=True),
        sa.Column("metadata", JSONB, nullable=False, server_default=EMPTY),
        sa.Column("source_run_id", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "dataset", "version", "idx", name="dataset_cases_pkey"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "dataset", "version"],
            ["datasets.tenant_id", "datasets.name", "datasets.version"],
            name="dataset_cases_dataset_fkey",
            ondelete="CASCADE",
        ),
    )
    op.create_table(
        "experiments",
        sa.Column("experiment_id", sa.Text, primary_key=True),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("dataset", sa.Text, nullable=False),
        sa.Column("dataset_version", sa.Integer, nullable=False),
        sa.Column("agent", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=True),
        sa.Column("instructions", sa.Text, nullable=True),
        sa.Column("recorded_tools", sa.Boolean, nullable=False),
        sa.Column("repeat", sa.Integer, nullable=False),
        sa.Column("concurrency", sa.Integer, nullable=False),
        sa.Column("scorers", JSONB, nullable=False),
        sa.Column("rescored_from", sa.Text, nullable=True),
        sa.Column("priority", sa.Integer, nullable=True),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("cases_total", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("experiments_tenant_created", "experiments", ["tenant_id", "created_at"])
    op.create_table(
        "experiment_results",
        sa.Column("experiment_id", sa.Text, nullable=False),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("repetition", sa.Integer, nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=True),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("run_status", sa.Text, nullable=True),
        sa.Column("scores", JSONB, nullable=False, server_default=EMPTY),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("cost_usd", sa.Numeric(14, 6), nullable=False, server_default="0"),
        sa.Column("tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("latency_ms", sa.BigInteger, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("experiment_id", "idx", "repetition", name="experiment_results_pkey"),
        sa.ForeignKeyConstraint(
            ["experiment_id"],
            ["experiments.experiment_id"],
            name="experiment_results_experiment_fkey",
            ondelete="CASCADE",
        ),
    )
    op.create_table(
        "eval_judgements",
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("judge_key", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("score", sa.Float, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("cost_usd", sa.Numeric(14, 6), nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("tenant_id", "run_id", "judge_key", name="eval_judgements_pkey"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="eval_judgements_run_fkey", ondelete="CASCADE"),
    )
    op.create_table(
        "scorers",
        sa.Column("task_queue", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("worker", sa.Text, nullable=False, server_default=""),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("task_queue", "name", name="scorers_pkey"),
    )


def downgrade() -> None:
    op.drop_table("scorers")
    op.drop_table("eval_judgements")
    op.drop_table("experiment_results")
    op.drop_index("experiments_tenant_created", table_name="experiments")
    op.drop_table("experiments")
    op.drop_table("dataset_cases")
    op.drop_table("datasets")
