"""The one shape of a provider adapter: `complete()` opens the provider's stream, joins it into a
`ModelTurn`, and turns every way that can fail into a `waypoint.errors.ModelError` by the rules of
`waypoint.retry.classify_model_failure`. An adapter fills in three hooks:

- `answer(call)`: send the request and join the answer (streamed, or a whole body an endpoint sent
  instead: put its text in `call.body`, so an unreadable one is quoted in the error);
- `failure(exc, attempt, spec)`: what one of the SDK's own errors (`sdk_errors`) means for retries;
- the exception types of the SDK's HTTP library (`transport_errors`, `timeout_errors`): a connection
  refused, reset or dropped mid-stream, and a read that took too long.

The failure ladder is here once: SDK error, timeout, broken connection, a stream that ended before
the model finished (`Incomplete`), an answer that came whole but cannot be used (`Malformed`), and
an answer of the wrong shape.
"""

from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from waypoint.deltas import DeltaSink
from waypoint.errors import ModelError
from waypoint.retry import classify_model_failure
from waypoint.types import Message, ModelTurn, RetrySpec


class Incomplete(Exception):
    """A stream that ended before the model's finish: the connection dropped (retryable)."""


class Malformed(Exception):
    """An answer that came whole but cannot be used (a malformed function call, say)."""


# An answer of the wrong shape: a field missing, a body that is not the provider's JSON.
_SHAPE_ERRORS = (AttributeError, IndexError, KeyError, TypeError, ValueError)


@dataclass
class Call:
    """One model call's request, as the adapter's hooks see it; `body` is a whole (not streamed)
    answer's text once `answer` read one."""

    messages: list[Message]
    tools: list[dict[str, Any]]
    step: int | None
    deltas: DeltaSink | None
    max_tokens: int | None
    body: str = ""


class StreamingAdapter(ABC):
    """A `waypoint.models.ModelAdapter` over a provider SDK that streams."""

    name: str
    model: str
    sdk_errors: ClassVar[tuple[type[Exception], ...]]
    transport_errors: ClassVar[tuple[type[Exception], ...]]
    timeout_errors: ClassVar[tuple[type[Exception], ...]] = ()

    @property
    @abstractmethod
    def endpoint(self) -> str:
        """The URL the calls go to, as errors name it."""

    @abstractmethod
    async def answer(self, call: Call) -> ModelTurn:
        """Send the request and join the answer into one turn."""

    @abstractmethod
    def failure(self, exc: Exception, attempt: int, spec: RetrySpec) -> ModelError:
        """What an SDK error (one of `sdk_errors`) means for the retry policy."""

    def unusable(self, exc: Exception, call: Call) -> str:
        """What an answer of the wrong shape said, for the error: the whole body when there was one."""
        return call.body or str(exc)

    def classify(self, attempt: int, spec: RetrySpec, **what: Any) -> ModelError:
        return classify_model_failure(
            endpoint=self.endpoint, attempt=attempt, spec=spec, jitter=random.uniform(0.5, 1.0), **what
        )

    async def complete(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        *,
        step: int | None = None,
        attempt: int = 1,
        retry: RetrySpec | None = None,
        deltas: DeltaSink | None = None,
        max_tokens: int | None = None,
    ) -> ModelTurn:
        spec = retry or RetrySpec()
        started = time.monotonic()
        call = Call(messages, tools, step, deltas, max_tokens)
        try:
            turn = await self.answer(call)
        except self.sdk_errors as exc:
            raise self.failure(exc, attempt, spec) from exc
        except self.timeout_errors as exc:
            raise self.classify(attempt, spec, timed_out=True, message=f"{type(exc).__name__}: {exc}") from None
        except self.transport_errors as exc:  # refused, reset, or the connection dropped mid-stream
            message = f"the answer stream broke off: {type(exc).__name__}: {exc}"
            raise self.classify(attempt, spec, unreachable=True, message=message) from exc
        except Incomplete as exc:
            raise self.classify(attempt, spec, unreachable=True, message=str(exc)) from None
        except Malformed as exc:
            raise self.classify(attempt, spec, malformed=str(exc)) from None
        except _SHAPE_ERRORS as exc:
            raise self.classify(attempt, spec, malformed=self.unusable(exc, call)) from None
        return replace(turn, latency_ms=int((time.monotonic() - started) * 1000))


__all__ = ["Call", "Incomplete", "Malformed", "StreamingAdapter"]
