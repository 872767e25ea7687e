"""notification outbox: one delivery per ([[notify]] target, event) with its attempts, and the cursor over
`events` the deliveries are made from (starting after the newest event: history is not notified)

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notification_deliveries",
        sa.Column("id", sa.String(length=40), primary_key=True),
        sa.Column("target", sa.String(length=200), nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("change_id", sa.String(length=40), nullable=False),
        sa.Column("project", sa.String(length=200), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_status", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("target", "event_id", name="uq_notification_deliveries_target_event"),
    )
    op.create_index("ix_notification_deliveries_due", "notification_deliveries", ["state", "next_attempt_at"])
    op.create_table(
        "notification_cursor",
        sa.Column("name", sa.String(length=32), primary_key=True),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
    )
    op.execute("INSERT INTO notification_cursor (name, event_id) SELECT 'events', COALESCE(MAX(id), 0) FROM events")


def downgrade() -> None:
    op.drop_table("notification_cursor")
    op.drop_index("ix_notification_deliveries_due", table_name="notification_deliveries")
    op.drop_table("notification_deliveries")
