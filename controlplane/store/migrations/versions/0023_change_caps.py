"""per-Change admission caps: a project's max_active_runs_per_change (default 8), and whether a queued run
held by it was said so already (one run.blocked_limit event per blocking)

Revision ID: 0023
Revises: 0022
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.add_column(sa.Column("max_active_runs_per_change", sa.Integer(), nullable=False, server_default="8"))
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("blocked_limit", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("blocked_limit")
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.drop_column("max_active_runs_per_change")
