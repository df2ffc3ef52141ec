"""Typed answers: an agent's `output_type`, the `final_answer` tool, and the check of an answer.

`Agent(output_type=...)` takes a pydantic model class or a JSON schema (a dict) of an object. The
model is offered one more tool, `final_answer`, whose parameters are that schema: the run ends
when the model calls it with arguments that validate, and its output is that JSON. A tool works
with every provider, and alongside the agent's other tools. A plain-text answer that is valid JSON
for the schema ends the run too (a fenced ```json block included), for models that answer in text.

An answer that does not validate (not JSON, or not the schema's shape) is a bad call: the model
reads why, as the final_answer call's tool error or as a message after a text answer, and tries
again; it counts against the agent's `max_repairs`, like any bad tool call.

The check runs in the `call_model` activity, which has the agent's definition (a pydantic model's
own validators included); the workflow reads its verdict from the turn (`ModelTurn.answer`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import jsonschema
import pydantic

from waypoint.errors import ConfigError
from waypoint.names import FINAL_ANSWER_TOOL
from waypoint.types import ModelTurn, TypedAnswer

# What the model reads of a validation error, at most (the first few problems, in one line).
MAX_ERROR_CHARS = 2000
MAX_PROBLEMS = 5
FENCED = re.compile(r"^```(?:json)?\s*\n(.*?)\n?```$", re.DOTALL)


OutputType = type[pydantic.BaseModel] | Mapping[str, Any]


def output_schema(agent: str, output_type: object) -> dict[str, Any]:
    """The JSON schema of `output_type`; ConfigError, in one line, when it is neither a pydantic model
    class nor a valid JSON schema of an object."""
    if isinstance(output_type, type) and issubclass(output_type, pydantic.BaseModel):
        try:
            schema = output_type.model_json_schema()
        except pydantic.PydanticUserError as exc:
            why = f"output_type {output_type.__name__} has no JSON schema: {str(exc).splitlines()[0]}"
            raise ConfigError(f"agent {agent!r}: {why}") from None
    elif isinstance(output_type, Mapping):
        schema = dict(output_type)
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            where = exc.json_path if exc.path else "the schema"
            why = f"output_type is not a valid JSON schema: {where}: {exc.message}"
            raise ConfigError(f"agent {agent!r}: {why}") from None
    else:
        raise ConfigError(
            f"agent {agent!r}: output_type must be a pydantic model class or a JSON schema dict, "
            f"not {type(output_type).__name__}"
        )
    if schema.get("type") != "object":
        raise ConfigError(
            f'agent {agent!r}: output_type must describe a JSON object ("type": "object"): '
            "it becomes the parameters of the final_answer tool"
        )
    return schema


def final_answer_tool(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The `final_answer` tool, in the chat-completions shape."""
    description = (
        "Give your final answer: call this once you are done, with the answer as the arguments. The run ends with it."
    )
    if schema.get("description"):
        description += f" The answer: {schema['description']}"
    function = {"name": FINAL_ANSWER_TOOL, "description": description, "parameters": dict(schema)}
    return {"type": "function", "function": function}


def check_json(output_type: OutputType, schema: Mapping[str, Any], text: str) -> tuple[str | None, str | None]:
    """(the answer as validated JSON text, None) or (None, why it does not validate)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return None, f"the answer is not JSON ({exc})"
    if isinstance(output_type, type) and issubclass(output_type, pydantic.BaseModel):
        try:  # its own validators too; the stored JSON is what it dumps (defaults filled in)
            return output_type.model_validate(value).model_dump_json(), None
        except pydantic.ValidationError as exc:
            problems = [
                f"{'.'.join(str(p) for p in e['loc']) or '(the answer)'}: {e['msg']}"
                for e in exc.errors()[:MAX_PROBLEMS]
            ]
            return None, shorten("the answer does not match the output schema: " + "; ".join(problems))
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(value), key=jsonschema.exceptions.relevance)
    if errors:
        problems = [f"{e.json_path}: {e.message}" for e in errors[:MAX_PROBLEMS]]
        return None, shorten("the answer does not match the output schema: " + "; ".join(problems))
    return json.dumps(value, ensure_ascii=False), None


def check_turn(output_type: OutputType, schema: Mapping[str, Any], turn: ModelTurn) -> TypedAnswer | None:
    """The typed answer a turn gives, checked: its first `final_answer` call, else (with no tool
    calls) its text; None when it gives none (other tool calls only, or nothing at all)."""
    call = next((c for c in turn.tool_calls if c.name == FINAL_ANSWER_TOOL), None)
    if call is not None:
        output, error = check_json(output_type, schema, call.arguments or "{}")
        if error is not None:
            error = f"{error}. Call {FINAL_ANSWER_TOOL} again with a corrected answer."
        return TypedAnswer(output_json=output, error=error, call_id=call.id)
    text = (turn.content or "").strip()
    if turn.tool_calls or not text:
        return None
    fenced = FENCED.match(text)
    output, error = check_json(output_type, schema, fenced.group(1) if fenced else text)
    if error is not None:
        error = f"Your answer is not the final answer the task needs: {error}. Call {FINAL_ANSWER_TOOL} with it."
    return TypedAnswer(output_json=output, error=error)


def shorten(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."
