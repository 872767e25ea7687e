"""change base branch: the branch a Change starts from and composes its candidate on ("": the project's),
so a fix round stacks on its pull request's branch

Revision ID: 0020
Revises: 0019
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("changes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("base_branch", sa.String(length=300), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("changes", schema=None) as batch_op:
        batch_op.drop_column("base_branch")
