"""Helpers to try and test agents offline: a real local server that speaks the OpenAI API."""
