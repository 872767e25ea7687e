"""claims, conflicts, and the run's Context Packet hash

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 05:02:11.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "claims",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("change_id", sa.String(length=40), nullable=False),
        sa.Column("task_id", sa.String(length=40), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("claims", schema=None) as batch_op:
        batch_op.create_index("ix_claims_resource", ["resource"], unique=False)
        batch_op.create_index(batch_op.f("ix_claims_run_id"), ["run_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_claims_change_id"), ["change_id"], unique=False)

    op.create_table(
        "conflicts",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("change_id", sa.String(length=40), nullable=False),
        sa.Column("task_a", sa.String(length=40), nullable=False),
        sa.Column("task_b", sa.String(length=40), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("resources", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["change_id"],
            ["changes.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("change_id", "task_a", "task_b", name="uq_conflicts_change_tasks"),
    )
    with op.batch_alter_table("conflicts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_conflicts_change_id"), ["change_id"], unique=False)

    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("context_hash", sa.String(length=64), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("context_hash")

    with op.batch_alter_table("conflicts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_conflicts_change_id"))

    op.drop_table("conflicts")
    with op.batch_alter_table("claims", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_claims_change_id"))
        batch_op.drop_index(batch_op.f("ix_claims_run_id"))
        batch_op.drop_index("ix_claims_resource")

    op.drop_table("claims")
