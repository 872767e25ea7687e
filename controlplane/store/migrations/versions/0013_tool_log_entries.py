"""tool log entries: each tool-stream message of a run stored once, instead of its whole tool-log
document rewritten in the object store on every message

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_log_entries",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("tool_log_entries", schema=None) as batch_op:
        batch_op.create_index("ix_tool_log_entries_run_seq", ["run_id", "seq"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("tool_log_entries", schema=None) as batch_op:
        batch_op.drop_index("ix_tool_log_entries_run_seq")
    op.drop_table("tool_log_entries")
