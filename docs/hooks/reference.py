"""The reference pages, generated from the code at build time (a mkdocs hook), so they cannot drift.

A page under `docs/reference/` holds a marker such as `<!-- reference: cli -->`; `on_page_markdown`
replaces it with what the code says now:

- `python`: every name in `waypoint.__all__`, rendered by mkdocstrings from wherever it lives;
- `cli`: the typer app behind the `waypoint` script of pyproject.toml, every command and option;
- `http`: the FastAPI app's OpenAPI document (the `/v1` operations, and the schemas they use);
- `configuration`: the fields of `waypoint.Settings`, with their variables, defaults and descriptions;
- `errors`: the error tree of `waypoint.WaypointError`'s module.

Nothing here names a module below `waypoint`: the script entry point, the app factory and the
classes are found from the code, so a module that moves takes its reference with it.
`tests/test_readme.py` imports `cli_command` and `waypoint_commands` to check the commands the pages show.
"""

from __future__ import annotations

import ast
import html
import importlib
import inspect
import json
import re
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- reference: (\w+) -->")


# --- the hooks ------------------------------------------------------------------------------------


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return unescape_code_pipes(MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown))


def unescape_code_pipes(markdown: str) -> str:
    """GitHub needs `\\|` for a pipe in a code span of a table row; Python-Markdown splits no row inside
    a code span and would show the backslash. The pages stay right on GitHub, the site shows `|`."""
    lines = markdown.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("|"):
            lines[i] = re.sub(r"`[^`]*`", lambda m: m.group(0).replace("\\|", "|"), line)
    return "\n".join(lines)


def on_files(files: Any, config: Any) -> Any:
    """The OpenAPI document beside the page that renders it, for clients and code generators."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, "reference/openapi.json", content=json.dumps(openapi(), indent=1)))
    return files


# --- small helpers --------------------------------------------------------------------------------


def prose(text: object) -> str:
    """Text from the code as markdown: `<` and `>` outside code spans escaped, so a `<state_dir>` in a
    description shows instead of being taken for an HTML tag."""
    parts = re.split(r"(`[^`]*`)", str(text))
    return "".join(p if p.startswith("`") else html.escape(p, quote=False) for p in parts)


def cell(text: object) -> str:
    """Text for one cell of a markdown table: one line, pipes escaped."""
    return prose(" ".join(str(text).split())).replace("|", "\\|")


def code(text: object) -> str:
    value = str(text)
    return f"`` {value} ``" if "`" in value else f"`{value}`"


def first_paragraph(doc: str | None) -> str:
    return inspect.cleandoc(doc or "").split("\n\n", 1)[0]


# --- Python API -----------------------------------------------------------------------------------


def public_path(name: str, obj: Any) -> str:
    """Where a public name's object lives now: `module.Qualname` for a class or function, else the
    module attribute that holds it (a constant, a tuple of tools)."""
    import sys

    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str) and "<" not in qualname:
        return f"{module}.{qualname}"
    for module_name, mod in sorted(sys.modules.items()):
        if module_name.startswith("waypoint.") and mod is not None:
            for attr, value in vars(mod).items():
                if value is obj and not attr.startswith("_"):
                    return f"{module_name}.{attr}"
    return f"waypoint.{name}"


def python_api() -> str:
    """One mkdocstrings block per public name, at the path where the object lives now."""
    import waypoint

    out = ["| name | what it is |", "|---|---|"]
    blocks: list[str] = []
    for name in waypoint.__all__:
        obj = getattr(waypoint, name)
        path = public_path(name, obj)
        doc = getattr(obj, "__doc__", None) if path.endswith(f".{getattr(obj, '__qualname__', '')}") else None
        doc = doc or importlib.import_module(path.rsplit(".", 1)[0]).__doc__  # no docstring: its module's
        out.append(f"| [`{name}`](#{path}) | {cell(first_paragraph(doc))} |")
        if f"::: {path}\n" not in blocks:  # two names of one object: one section
            blocks.append(f"::: {path}\n")
    return "\n".join(out) + "\n\n" + "\n".join(blocks)


# --- CLI ------------------------------------------------------------------------------------------


def cli_command() -> Any:
    """The click command behind the `waypoint` script that pyproject.toml installs."""
    import typer
    import typer.main

    script = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["waypoint"]
    module = importlib.import_module(script.split(":", 1)[0])
    apps = [value for value in vars(module).values() if isinstance(value, typer.Typer)]
    if len(apps) != 1:
        raise RuntimeError(f"expected one typer app in {module.__name__}, found {len(apps)}")
    return typer.main.get_command(apps[0])


def waypoint_commands(group: Any = None, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command, groups included, depth first: (("cron", "create"), command)."""
    group = group or cli_command()
    for name in sorted(group.commands):
        command = group.commands[name]
        if getattr(command, "hidden", False):
            continue
        yield (*prefix, name), command
        if hasattr(command, "commands"):
            yield from waypoint_commands(command, (*prefix, name))


def usage(command: Any, ctx: Any) -> str:
    """The usage line `--help` prints."""
    return " ".join(command.get_usage(ctx).removeprefix("Usage:").split())


def context(command: Any, name: str, parent: Any = None) -> Any:
    """A click context for a command, so its parameters render as `--help` renders them."""
    return command.context_class(command, info_name=name, parent=parent)


def option_rows(command: Any, ctx: Any) -> list[str]:
    """The options as `--help` lists them: the names with their value's type, the help with its default."""
    rows = []
    for param in command.params:
        if param.param_type_name != "option" or param.hidden:
            continue
        record = param.get_help_record(ctx)
        if record:
            rows.append(f"| {code(record[0])} | {cell(record[1])} |")
    return rows


def cli() -> str:
    root = cli_command()
    root_ctx = context(root, "waypoint")
    out = ["```text", usage(root, root_ctx), "```", "", cell(first_paragraph(root.help)), ""]
    out += ["Global options (before the command):", "", "| option | what it does |", "|---|---|"]
    out += [*option_rows(root, root_ctx), ""]
    contexts = {(): root_ctx}
    for path, command in waypoint_commands(root):
        ctx = contexts[path] = context(command, path[-1], contexts[path[:-1]])
        out += [f"{'#' * min(2 + len(path) - 1, 4)} waypoint {' '.join(path)}", ""]
        out += ["```text", usage(command, ctx), "```", ""]
        help_text = inspect.cleandoc(command.help or command.short_help or "")
        if help_text:
            out += [prose(help_text.replace("\b\n", "")), ""]
        arguments = [p for p in command.params if p.param_type_name == "argument"]
        if arguments:
            out += ["| argument | what it is |", "|---|---|"]
            for p in arguments:
                out.append(f"| {code((p.metavar or p.name).upper())} | {cell(getattr(p, 'help', '') or '')} |")
            out.append("")
        rows = option_rows(command, ctx)
        if rows:
            out += ["| option | what it does |", "|---|---|", *rows, ""]
        if hasattr(command, "commands"):
            subs = [n for n, c in sorted(command.commands.items()) if not getattr(c, "hidden", False)]
            out += ["Commands: " + ", ".join(code(f"waypoint {' '.join(path)} {n}") for n in subs) + ".", ""]
    return "\n".join(out)


# --- HTTP API -------------------------------------------------------------------------------------


def app_factory() -> Callable[..., Any]:
    """The `create_app(settings, ...)` under waypoint/ that returns a FastAPI app (found by reading
    the source, so importing nothing else)."""
    package = ROOT / "waypoint"
    for path in sorted(package.rglob("*.py")):
        if "create_app" not in path.read_text():
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name == "create_app":
                if isinstance(node.returns, ast.Name) and node.returns.id == "FastAPI":
                    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                    factory: Callable[..., Any] = importlib.import_module(module).create_app
                    return factory
    raise RuntimeError("no `def create_app(...) -> FastAPI` under waypoint/")


_openapi: dict[str, Any] | None = None


def openapi() -> dict[str, Any]:
    global _openapi
    if _openapi is None:
        from waypoint import Settings

        _openapi = app_factory()(Settings()).openapi()
    return _openapi


def schema_name(schema: dict[str, Any]) -> str:
    """A schema as a type: a link to its section for a named one."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#schema-{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(schema_name(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {schema_name(schema.get('items', {}))}"
    if "additionalProperties" in schema and isinstance(schema["additionalProperties"], dict):
        return f"object of {schema_name(schema['additionalProperties'])}"
    if "enum" in schema:
        return " \\| ".join(code(v) for v in schema["enum"])
    return schema.get("type", "any")


def refs(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        if "$ref" in value:
            yield value["$ref"].rsplit("/", 1)[1]
        for item in value.values():
            yield from refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from refs(item)


def http() -> str:
    spec = openapi()
    schemas = spec.get("components", {}).get("schemas", {})
    out = [f"{cell(spec['info'].get('summary', ''))} OpenAPI {spec['openapi']}, version {spec['info']['version']}.", ""]
    operations = [
        (path, method, op)
        for path, item in spec["paths"].items()
        if path.startswith("/v1") or path == "/healthz"
        for method, op in item.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]
    out += ["| operation | what it does |", "|---|---|"]
    for path, method, op in operations:
        anchor = op["operationId"].lower()
        out.append(f"| [`{method.upper()} {path}`](#{anchor}) | {cell(op.get('summary', ''))} |")
    out.append("")
    used: list[str] = []
    for path, method, op in operations:
        out += [f"## `{method.upper()} {path}` {{ #{op['operationId'].lower()} }}", ""]
        if op.get("description"):
            out += [prose(inspect.cleandoc(op["description"])), ""]
        params = op.get("parameters", [])
        if params:
            out += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
            for p in params:
                kind = schema_name(p.get("schema", {}))
                required = "yes" if p.get("required") else ""
                out.append(f"| `{p['name']}` | {p['in']} | {kind} | {required} | {cell(p.get('description', ''))} |")
            out.append("")
        body = op.get("requestBody", {}).get("content", {})
        for media, content in body.items():
            out += [f"Body ({code(media)}): {schema_name(content.get('schema', {}))}", ""]
        out += ["| status | description | body |", "|---|---|---|"]
        for status, response in sorted(op.get("responses", {}).items()):
            kinds = ", ".join(
                f"{code(media)} {schema_name(c.get('schema', {}))}" for media, c in response.get("content", {}).items()
            )
            out.append(f"| {status} | {cell(response.get('description', ''))} | {kinds} |")
        out.append("")
        used += refs(op)
    # the schemas the operations above use, and the schemas those use
    seen: list[str] = []
    while used:
        name = used.pop(0)
        if name in seen or name not in schemas:
            continue
        seen.append(name)
        used += refs(schemas[name])
    out += ["## Schemas", ""]
    for name in sorted(seen):
        schema = schemas[name]
        out += [f"### {name} {{ #schema-{name.lower()} }}", ""]
        if schema.get("description"):
            out += [prose(inspect.cleandoc(schema["description"])), ""]
        properties = schema.get("properties", {})
        if properties:
            required = set(schema.get("required", []))
            out += ["| field | type | required | description |", "|---|---|---|---|"]
            for field, value in properties.items():
                need = "yes" if field in required else ""
                out.append(f"| `{field}` | {schema_name(value)} | {need} | {cell(value.get('description', ''))} |")
            out.append("")
        elif "enum" in schema:
            out += ["One of " + ", ".join(code(v) for v in schema["enum"]) + ".", ""]
    return "\n".join(out)


# --- configuration --------------------------------------------------------------------------------


def setting_variables(name: str, field: Any) -> list[str]:
    """The variables a setting reads, as `test_every_setting_is_documented` names them."""
    from waypoint import Settings

    aliases = getattr(field.validation_alias, "choices", None)
    if aliases:
        return list(aliases)
    return [f"{Settings.model_config.get('env_prefix', '')}{name}".upper()]


def configuration() -> str:
    from pydantic_core import PydanticUndefined

    from waypoint import Settings

    out = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        variables = " or ".join(code(v) for v in setting_variables(name, field))
        kind = getattr(field.annotation, "__name__", None) or str(field.annotation)
        kind = re.sub(r"\b(?:typing|pathlib|pydantic\.types)\.", "", kind)
        if field.default_factory is not None:
            default = code(field.default_factory())
        elif field.default is PydanticUndefined or field.default is None:
            default = "unset"
        else:
            default = code(getattr(field.default, "value", field.default))
        out.append(f"| {variables} | {code(kind)} | {default} | {cell(field.description or '')} |")
    return "\n".join(out) + "\n"


# --- errors ---------------------------------------------------------------------------------------


def errors() -> str:
    from waypoint import WaypointError

    module = importlib.import_module(WaypointError.__module__)
    doc = inspect.cleandoc(module.__doc__ or "")
    title, _, rest = doc.partition("\n\n")
    tree, _, after = rest.partition("\n\n")
    out = [title, "", "```text", inspect.cleandoc(tree), "```", "", after, ""]
    out += ["| error | is a | retryable | what it means |", "|---|---|---|---|"]
    for name, cls in vars(module).items():
        if isinstance(cls, type) and issubclass(cls, WaypointError) and cls.__module__ == module.__name__:
            parent = cls.__mro__[1].__name__ if cls is not WaypointError else "Exception"
            retry = "yes" if getattr(cls, "retryable", False) else ""
            out.append(f"| `{name}` | `{parent}` | {retry} | {cell(first_paragraph(cls.__doc__))} |")
    return "\n".join(out) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "python": python_api,
    "cli": cli,
    "http": http,
    "configuration": configuration,
    "errors": errors,
}
