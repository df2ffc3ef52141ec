"""The Postgres mirror: schema, connections, migrations and read queries."""
