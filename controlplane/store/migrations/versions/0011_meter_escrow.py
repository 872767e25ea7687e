"""meter escrow: each writer's slice of a meter's headroom, and which slice a reservation's share is in

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
        "meter_slices",
        sa.Column("meter_key", sa.String(length=300), sa.ForeignKey("meters.key"), primary_key=True),
        sa.Column("holder", sa.String(length=64), primary_key=True),
        sa.Column("granted", sa.BigInteger(), nullable=False),
        sa.Column("reserved", sa.BigInteger(), nullable=False),
        sa.Column("used", sa.BigInteger(), nullable=False),
        sa.Column("unbounded", sa.Boolean(), nullable=False),
        sa.Column("limit_seen", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    with op.batch_alter_table("meter_reservations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("holder", sa.String(length=64), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("used_amount", sa.BigInteger(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("reconciled", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_index(
        "ix_meter_reservations_unreconciled",
        "meter_reservations",
        ["holder", "meter_key"],
        postgresql_where=sa.text("settled AND NOT reconciled"),
        sqlite_where=sa.text("settled AND NOT reconciled"),
    )


def downgrade() -> None:
    op.drop_index("ix_meter_reservations_unreconciled", table_name="meter_reservations")
    with op.batch_alter_table("meter_reservations", schema=None) as batch_op:
        batch_op.drop_column("reconciled")
        batch_op.drop_column("used_amount")
        batch_op.drop_column("holder")
    op.drop_table("meter_slices")
