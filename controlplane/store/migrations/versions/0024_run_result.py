"""the session's result on a run: its final message (bounded, redacted), turns, its own cost count, success
and compactions, stored in the transaction that finishes the run (issue 29)

Revision ID: 0024
Revises: 0023
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("result_text", sa.Text(), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("result_turns", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("result_cost_micros", sa.BigInteger(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("result_success", sa.Boolean(), nullable=True))
        batch_op.add_column(sa.Column("compactions", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for column in ("compactions", "result_success", "result_cost_micros", "result_turns", "result_text"):
            batch_op.drop_column(column)
