"""projects over the API: workspace preparation settings, a sealed git credential, who minted a token,
and each run's branch and setup

Revision ID: 0014
Revises: 0013
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

PROJECT_COLUMNS: tuple[sa.Column[Any], ...] = (
    sa.Column("setup", sa.JSON(), nullable=False, server_default="[]"),
    sa.Column("setup_network", sa.Boolean(), nullable=False, server_default=sa.true()),
    sa.Column("env", sa.JSON(), nullable=False, server_default="{}"),
    sa.Column("git_name", sa.String(200), nullable=False, server_default=""),
    sa.Column("git_email", sa.String(200), nullable=False, server_default=""),
    sa.Column("branch_template", sa.String(300), nullable=False, server_default=""),
    sa.Column("cache_key_files", sa.JSON(), nullable=False, server_default="[]"),
    sa.Column("git_credential_kind", sa.String(16), nullable=False, server_default=""),
    sa.Column("git_credential_sealed", sa.Text(), nullable=False, server_default=""),
    sa.Column("git_credential_fingerprint", sa.String(16), nullable=False, server_default=""),
    sa.Column("git_credential_set_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("git_credential_set_by", sa.String(200), nullable=False, server_default=""),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True),
)
RUN_COLUMNS: tuple[sa.Column[Any], ...] = (
    sa.Column("branch", sa.String(300), nullable=False, server_default=""),
    sa.Column("setup_cached", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.Column("setup_seconds", sa.Double(), nullable=False, server_default="0"),
)


def upgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        for column in PROJECT_COLUMNS:
            batch_op.add_column(column)
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for column in RUN_COLUMNS:
            batch_op.add_column(column)
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("created_by", sa.String(200), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.drop_column("created_by")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for column in reversed(RUN_COLUMNS):
            batch_op.drop_column(column.name)
    with op.batch_alter_table("projects", schema=None) as batch_op:
        for column in reversed(PROJECT_COLUMNS):
            batch_op.drop_column(column.name)
