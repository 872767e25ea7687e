"""forge delivery retries: how often a delivery's processing failed on a passing forge error, and when it
is tried again

Revision ID: 0021
Revises: 0020
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("forge_deliveries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("forge_deliveries", schema=None) as batch_op:
        batch_op.drop_column("next_attempt_at")
        batch_op.drop_column("attempts")
