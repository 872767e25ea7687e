"""a project's repository on a forge (issue 28): forge, owner/name, API URL, label, fix rounds, the sealed
forge credential (a token or a GitHub App) and the sealed webhook secret

Revision ID: 0015
Revises: 0014
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

PROJECT_COLUMNS: tuple[sa.Column[Any], ...] = (
    sa.Column("forge", sa.String(16), nullable=False, server_default=""),
    sa.Column("forge_repo", sa.String(200), nullable=False, server_default=""),
    sa.Column("forge_api_url", sa.String(500), nullable=False, server_default=""),
    sa.Column("forge_label", sa.String(100), nullable=False, server_default="drover"),
    sa.Column("max_fix_rounds", sa.Integer(), nullable=False, server_default="3"),
    sa.Column("forge_credential_kind", sa.String(16), nullable=False, server_default=""),
    sa.Column("forge_credential_sealed", sa.Text(), nullable=False, server_default=""),
    sa.Column("forge_credential_fingerprint", sa.String(16), nullable=False, server_default=""),
    sa.Column("forge_app_id", sa.BigInteger(), nullable=False, server_default="0"),
    sa.Column("forge_installation_id", sa.BigInteger(), nullable=False, server_default="0"),
    sa.Column("forge_credential_set_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("forge_credential_set_by", sa.String(200), nullable=False, server_default=""),
    sa.Column("webhook_secret_sealed", sa.Text(), nullable=False, server_default=""),
    sa.Column("webhook_secret_set_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("webhook_secret_set_by", sa.String(200), nullable=False, server_default=""),
)


def upgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        for column in PROJECT_COLUMNS:
            batch_op.add_column(column)


def downgrade() -> None:
    with op.batch_alter_table("projects", schema=None) as batch_op:
        for column in reversed(PROJECT_COLUMNS):
            batch_op.drop_column(column.name)
