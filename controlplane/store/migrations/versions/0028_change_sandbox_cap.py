"""per-Change sandbox cap: a project's max_open_sandboxes_per_change (default 4), next to its
max_active_runs_per_change; a run it holds is noted with the same runs.blocked_limit

Revision ID: 0028
Revises: 0027
"""

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("max_open_sandboxes_per_change", sa.Integer(), nullable=False, server_default="4")
        )


def downgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.drop_column("max_open_sandboxes_per_change")
