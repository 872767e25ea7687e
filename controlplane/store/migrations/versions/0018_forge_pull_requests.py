"""forge pull requests: a project's default budget, pull-request branch template and check command for
issue Changes; each issue Change's round, pull request, outcome and last comment digest

Revision ID: 0018
Revises: 0017
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

PROJECT_COLUMNS: tuple[sa.Column[Any], ...] = (
    sa.Column("forge_budget_usd", sa.Float(), nullable=False, server_default="0"),
    sa.Column("forge_branch_template", sa.String(length=300), nullable=False, server_default="drover/issue-{number}"),
    sa.Column("forge_check_command", sa.Text(), nullable=False, server_default=""),
)
LINK_COLUMNS: tuple[sa.Column[Any], ...] = (
    sa.Column("round", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("pr_number", sa.BigInteger(), nullable=False, server_default="0"),
    sa.Column("pr_branch", sa.String(length=300), nullable=False, server_default=""),
    sa.Column("outcome", sa.String(length=24), nullable=False, server_default=""),
    sa.Column("outcome_reason", sa.Text(), nullable=False, server_default=""),
    sa.Column("comment_digest", sa.String(length=64), nullable=False, server_default=""),
)


def upgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        for column in PROJECT_COLUMNS:
            batch_op.add_column(column)
    with op.batch_alter_table("forge_issue_changes", schema=None) as batch_op:
        for link_column in LINK_COLUMNS:
            batch_op.add_column(link_column)
        batch_op.create_index("ix_forge_issue_changes_pr", ["project", "pr_number"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("forge_issue_changes", schema=None) as batch_op:
        batch_op.drop_index("ix_forge_issue_changes_pr")
        for link_column in reversed(LINK_COLUMNS):
            batch_op.drop_column(link_column.name)
    with op.batch_alter_table("projects", schema=None) as batch_op:
        for column in reversed(PROJECT_COLUMNS):
            batch_op.drop_column(column.name)
