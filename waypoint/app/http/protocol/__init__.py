"""The Agent Protocol (the API of LangGraph Server) over Waypoint runs."""
