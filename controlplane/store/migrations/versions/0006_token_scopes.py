"""token scopes: an agent token's pool, a user token's projects, expiry, revocation, last use;
the token an agent name is bound to

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pool", sa.String(length=200), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("projects", sa.JSON(), nullable=False, server_default="[]"))
        batch_op.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.add_column(sa.Column("token_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("pool", sa.String(length=200), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.drop_column("pool")
        batch_op.drop_column("token_id")
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        for column in ("last_used_at", "revoked_at", "expires_at", "projects", "pool"):
            batch_op.drop_column(column)
