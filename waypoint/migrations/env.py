"""Alembic environment. Waypoint runs migrations programmatically (`waypoint migrate`,
`waypoint dev`), handing a live connection in through `config.attributes`."""

from alembic import context

from waypoint.store.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations with `waypoint migrate`, which supplies the database connection")

context.configure(connection=connection, target_metadata=metadata, transaction_per_migration=True)
with context.begin_transaction():
    context.run_migrations()
