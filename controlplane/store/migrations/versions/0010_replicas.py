"""replicas: which replica holds an agent's stream and until when (its lease); objects every replica reads

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.add_column(sa.Column("replica", sa.String(length=100), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "objects",
        sa.Column("key", sa.String(length=1000), primary_key=True),
        sa.Column("data", sa.LargeBinary(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("objects")
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.drop_column("lease_until")
        batch_op.drop_column("replica")
