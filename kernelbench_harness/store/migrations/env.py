"""Alembic environment for the kbench results store.

kbench runs migrations programmatically (:class:`~kernelbench_harness.store.Store` upgrades to head
on open) and hands its own connection in ``config.attributes["connection"]``. Running
``alembic -x url=sqlite:///results/kbench.db upgrade head`` with this folder as the script
location also works.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from kernelbench_harness.store.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    engine = create_engine(url)
    with engine.connect() as conn:
        _run(conn)
        conn.commit()
    engine.dispose()


if context.is_offline_mode():
    context.configure(
        url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata, literal_binds=True
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
