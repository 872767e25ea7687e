"""forge issue changes: which Change an issue on the forge started (so an issue starts one at a time), the
delivery that started it and the comment Drover posted; and why a delivery failed

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "forge_issue_changes",
        sa.Column("change_id", sa.String(length=40), nullable=False),
        sa.Column("project", sa.String(length=200), nullable=False),
        sa.Column("issue_number", sa.BigInteger(), nullable=False),
        sa.Column("delivery_id", sa.String(length=100), nullable=False),
        sa.Column("comment_id", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["change_id"], ["changes.id"]),
        sa.PrimaryKeyConstraint("change_id"),
    )
    with op.batch_alter_table("forge_issue_changes", schema=None) as batch_op:
        batch_op.create_index("ix_forge_issue_changes_issue", ["project", "issue_number"], unique=False)
    with op.batch_alter_table("forge_deliveries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reason", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("forge_deliveries", schema=None) as batch_op:
        batch_op.drop_column("reason")
    with op.batch_alter_table("forge_issue_changes", schema=None) as batch_op:
        batch_op.drop_index("ix_forge_issue_changes_issue")
    op.drop_table("forge_issue_changes")
