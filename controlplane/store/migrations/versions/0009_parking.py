"""parking: a project's answer window, a parked run's session, the run that resumes it

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.add_column(sa.Column("answer_window_minutes", sa.Double(), nullable=False, server_default="15"))
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("parked", sa.JSON(), nullable=False, server_default="{}"))
        batch_op.add_column(sa.Column("resume_of", sa.String(length=40), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("resume_of")
        batch_op.drop_column("parked")
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.drop_column("answer_window_minutes")
