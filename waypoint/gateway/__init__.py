"""The Temporal side of the client: the gateway every Temporal call goes through, Schedules (agents'
and compaction's), the deploy gate, the check of Postgres against Temporal's histories, and where a
running dev stack and the code installed here are found. The client (`waypoint.client`) and the
shell (`waypoint.app`) stand above it; it imports neither."""
