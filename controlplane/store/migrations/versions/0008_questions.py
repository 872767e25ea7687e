"""questions: what sessions asked people, and the answers (delivered as run input)

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "questions",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("change_id", sa.String(length=40), nullable=False),
        sa.Column("task_id", sa.String(length=40), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("blocking", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("answered_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["change_id"], ["changes.id"]),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("questions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_questions_change_id"), ["change_id"], unique=False)
        batch_op.create_index("ux_questions_run_key", ["run_id", "key"], unique=True)
    with op.batch_alter_table("run_inputs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("question_id", sa.String(length=40), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("run_inputs", schema=None) as batch_op:
        batch_op.drop_column("question_id")
    with op.batch_alter_table("questions", schema=None) as batch_op:
        batch_op.drop_index("ux_questions_run_key")
        batch_op.drop_index(batch_op.f("ix_questions_change_id"))
    op.drop_table("questions")
