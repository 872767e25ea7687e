"""harness: model calls, changesets, candidates

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 03:56:47.834562
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "changesets",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("change_id", sa.String(length=40), nullable=False),
        sa.Column("task_id", sa.String(length=40), nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("branch", sa.String(length=300), nullable=False),
        sa.Column("commit", sa.String(length=64), nullable=False),
        sa.Column("base_commit", sa.String(length=64), nullable=False),
        sa.Column("start_commit", sa.String(length=64), nullable=False),
        sa.Column("stacked_on", sa.JSON(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("own_files", sa.JSON(), nullable=False),
        sa.Column("patch_ref", sa.Text(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("intent", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["change_id"],
            ["changes.id"],
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id"),
    )
    with op.batch_alter_table("changesets", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_changesets_change_id"), ["change_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_changesets_task_id"), ["task_id"], unique=False)

    op.create_table(
        "model_calls",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("purpose", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("estimate_micros", sa.BigInteger(), nullable=False),
        sa.Column("cost_micros", sa.BigInteger(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_read_tokens", sa.BigInteger(), nullable=False),
        sa.Column("error", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("settled_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("model_calls", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_model_calls_run_id"), ["run_id"], unique=False)
        batch_op.create_index("ux_model_calls_run_key", ["run_id", "key"], unique=True)

    with op.batch_alter_table("changes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("candidate_state", sa.String(length=16), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("candidate_branch", sa.String(length=300), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("candidate_commit", sa.String(length=64), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("reason", sa.Text(), nullable=False, server_default=""))

    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.add_column(sa.Column("commands", sa.JSON(), nullable=False, server_default="[]"))
        batch_op.add_column(sa.Column("network", sa.Boolean(), nullable=False, server_default=sa.false()))

    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("driver", sa.String(length=16), nullable=False, server_default="command"))
        batch_op.add_column(sa.Column("tier", sa.String(length=16), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("model", sa.String(length=200), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("model")
        batch_op.drop_column("tier")
        batch_op.drop_column("driver")

    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.drop_column("network")
        batch_op.drop_column("commands")

    with op.batch_alter_table("changes", schema=None) as batch_op:
        batch_op.drop_column("reason")
        batch_op.drop_column("candidate_commit")
        batch_op.drop_column("candidate_branch")
        batch_op.drop_column("candidate_state")

    with op.batch_alter_table("model_calls", schema=None) as batch_op:
        batch_op.drop_index("ux_model_calls_run_key")
        batch_op.drop_index(batch_op.f("ix_model_calls_run_id"))

    op.drop_table("model_calls")
    with op.batch_alter_table("changesets", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_changesets_task_id"))
        batch_op.drop_index(batch_op.f("ix_changesets_change_id"))

    op.drop_table("changesets")
