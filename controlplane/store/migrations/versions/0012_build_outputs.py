"""build outputs: a project's patterns of files ChangeSets leave out, and what each ChangeSet left out

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.add_column(sa.Column("build_outputs", sa.JSON(), nullable=False, server_default="[]"))
    with op.batch_alter_table("changesets", schema=None) as batch_op:
        batch_op.add_column(sa.Column("left_out", sa.JSON(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("changesets", schema=None) as batch_op:
        batch_op.drop_column("left_out")
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.drop_column("build_outputs")
