"""forge deliveries: each webhook delivery the forge loop will use, kept once per X-GitHub-Delivery (its
primary key) with the few fields the loop reads, never the body

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "forge_deliveries",
        sa.Column("delivery_id", sa.String(length=100), nullable=False),
        sa.Column("project", sa.String(length=200), nullable=False),
        sa.Column("event", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=40), nullable=False),
        sa.Column("number", sa.BigInteger(), nullable=False),
        sa.Column("label", sa.String(length=100), nullable=False),
        sa.Column("sender", sa.String(length=200), nullable=False),
        sa.Column("head_sha", sa.String(length=64), nullable=False),
        sa.Column("conclusion", sa.String(length=40), nullable=False),
        sa.Column("comment_id", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("delivery_id"),
    )
    with op.batch_alter_table("forge_deliveries", schema=None) as batch_op:
        batch_op.create_index("ix_forge_deliveries_project", ["project"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("forge_deliveries", schema=None) as batch_op:
        batch_op.drop_index("ix_forge_deliveries_project")
    op.drop_table("forge_deliveries")
