"""routing and budgets

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 04:16:29.610482
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "meters",
        sa.Column("key", sa.String(length=300), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("period", sa.String(length=16), nullable=False),
        sa.Column("unit", sa.String(length=8), nullable=False),
        sa.Column("limit_amount", sa.BigInteger(), nullable=False),
        sa.Column("used", sa.BigInteger(), nullable=False),
        sa.Column("reserved", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_table(
        "meter_reservations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("reservation_id", sa.String(length=40), nullable=False),
        sa.Column("meter_key", sa.String(length=300), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("settled", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["meter_key"],
            ["meters.key"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("meter_reservations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_meter_reservations_reservation_id"), ["reservation_id"], unique=False)

    op.create_table(
        "decision_receipts",
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("change_id", sa.String(length=40), nullable=False),
        sa.Column("task_id", sa.String(length=40), nullable=False),
        sa.Column("tier", sa.String(length=16), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("run_id"),
    )
    with op.batch_alter_table("decision_receipts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_decision_receipts_change_id"), ["change_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_decision_receipts_task_id"), ["task_id"], unique=False)

    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.add_column(sa.Column("monthly_budget_usd", sa.Double(), nullable=False, server_default="0"))

    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("member", sa.String(length=200), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("not_before", sa.DateTime(timezone=True), nullable=True))

    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("attempts_reset_at", sa.DateTime(timezone=True), nullable=True))

    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("monthly_budget_usd", sa.Double(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.drop_column("monthly_budget_usd")

    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_column("attempts_reset_at")

    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("not_before")
        batch_op.drop_column("member")

    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.drop_column("monthly_budget_usd")

    with op.batch_alter_table("decision_receipts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_decision_receipts_task_id"))
        batch_op.drop_index(batch_op.f("ix_decision_receipts_change_id"))

    op.drop_table("decision_receipts")
    with op.batch_alter_table("meter_reservations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_meter_reservations_reservation_id"))

    op.drop_table("meter_reservations")
    op.drop_table("meters")
