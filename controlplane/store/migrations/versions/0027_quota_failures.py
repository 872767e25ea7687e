"""quota failures: the 429 and quota errors members' calls met, in the database so every replica sees them
and a restart keeps them (seed 004's observed failures; pruned after observed_failure_retention_minutes)

Revision ID: 0027
Revises: 0025
"""

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "quota_failures",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("route_key", sa.String(length=200), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
    )
    op.create_index("ix_quota_failures_route_key_at", "quota_failures", ["route_key", "at"])


def downgrade() -> None:
    op.drop_index("ix_quota_failures_route_key_at", table_name="quota_failures")
    op.drop_table("quota_failures")
