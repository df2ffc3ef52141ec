"""The HTTP layer's own errors (no key, an unsupported feature, over a rate limit), each with its
status and stable code. It sits below everything else in `http/`: the rate limits, auth and routes
raise these, and `errors.py` turns them into the one JSON shape."""

from __future__ import annotations


class HttpError(Exception):
    """An error of the HTTP layer itself (no key, an unsupported feature), with its status and code."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = headers or {}


def unauthorized(message: str) -> HttpError:
    return HttpError(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})


def not_supported(message: str) -> HttpError:
    return HttpError(501, "not_supported", message)
