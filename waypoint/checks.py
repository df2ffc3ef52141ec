"""The rules of what users type: tenant ids, run ids, counts, values of closed sets, and what the
store can hold.

Each check returns the value or raises InvalidInput naming the rule. Standard library only: the
Settings validate with it, so do the client (and through it the CLI, the HTTP API and MCP).

What the store can hold: Postgres refuses a NUL character (U+0000) in TEXT and JSONB, a string
with a surrogate code point (U+D800-U+DFFF, half of a UTF-16 pair) has no UTF-8 form, and a
number past its INTEGER column fails the statement. A run started with such a value would fail on
its first write, for ever; so the client refuses it where it enters, before anything starts.
"""

from __future__ import annotations

import ipaddress
import math
import re
import socket
import uuid
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from waypoint.errors import InvalidInput

TENANT_MAX = 64
TENANT_RULE = f"1 to {TENANT_MAX} characters: letters, digits, '.', '_' or '-', starting with a letter or digit"
_TENANT = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{TENANT_MAX - 1}}}")


def check_tenant(tenant: str) -> str:
    """The tenant id, or InvalidInput naming the rule it breaks."""
    if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
        raise InvalidInput(f"invalid tenant id {tenant!r}: a tenant id is {TENANT_RULE}")
    return tenant


def new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:12]}"


# --- what the store can hold ---------------------------------------------------------------------

INT_MAX = 2**31 - 1  # Postgres INTEGER: step numbers, event seqs, max_steps
BIGINT_MAX = 2**63 - 1  # Postgres BIGINT: token counts
COST_MAX_USD = 99_999_999  # runs.cost_usd is NUMERIC(14, 6)
DEADLINE_MAX_SECONDS = 3650 * 86_400  # ten years: past any run, well within what a Temporal timer holds
TEXT_MAX = 100_000  # characters of a task or a message: they travel in Temporal history (2 MB a payload)
NAME_MAX = 1_000  # characters of a run id, agent name, model spec... (Temporal's longest workflow id)

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_Text = TypeVar("_Text", bound=str | None)


def check_text(name: str, value: _Text, *, high: int = TEXT_MAX) -> _Text:
    """Text the store can hold (None passes): no NUL, no surrogate code point, at most `high` characters."""
    if value is None:
        return value
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be text, got {type(value).__name__}")
    bad = _UNSTORABLE.search(value)
    if bad is not None:
        char = bad.group()
        what = "a NUL character (U+0000)" if char == "\x00" else f"a lone surrogate (U+{ord(char):04X})"
        raise InvalidInput(
            f"{name} has {what} at position {bad.start()}, which cannot be stored: send valid UTF-8 text without it"
        )
    if len(value) > high:
        raise InvalidInput(f"{name} is {len(value)} characters: keep it to {high}")
    return value


def check_name(name: str, value: _Text) -> _Text:
    """A run id, an agent name, a model spec, a call id: text the store holds, at most NAME_MAX characters."""
    return check_text(name, value, high=NAME_MAX)


IDEMPOTENCY_KEY_MAX = 200
_KEY = re.compile(rf"[\x21-\x7e]{{1,{IDEMPOTENCY_KEY_MAX}}}")


def check_idempotency_key(key: _Text) -> _Text:
    """An idempotency key (None passes): 1 to IDEMPOTENCY_KEY_MAX printable ASCII characters, no
    spaces (a UUID, a request id, `ticket-4711`), as an HTTP header can carry it unchanged."""
    if key is not None and (not isinstance(key, str) or not _KEY.fullmatch(key)):
        shown = key if isinstance(key, str) and len(key) <= 40 else f"{str(key)[:40]}..."
        raise InvalidInput(
            f"invalid idempotency key {shown!r}: a key is 1 to {IDEMPOTENCY_KEY_MAX} printable ASCII characters "
            "without spaces, e.g. a UUID"
        )
    return key


FINGERPRINT_MIN = 4  # hex digits of a prefix: fewer would match most versions
FINGERPRINT_MAX = 64  # a whole sha256
_FINGERPRINT = re.compile(rf"[0-9a-f]{{{FINGERPRINT_MIN},{FINGERPRINT_MAX}}}")


def check_fingerprint(value: _Text) -> _Text:
    """An agent version's fingerprint or a prefix of it (None passes): FINGERPRINT_MIN to
    FINGERPRINT_MAX hex digits, lower case (an upper-case one is read as lower case)."""
    if value is None:
        return value
    text = value.lower() if isinstance(value, str) else value
    if not isinstance(text, str) or not _FINGERPRINT.fullmatch(text):
        shown = value if isinstance(value, str) and len(value) <= 70 else f"{str(value)[:70]}..."
        raise InvalidInput(
            f"invalid fingerprint {shown!r}: give {FINGERPRINT_MIN} to {FINGERPRINT_MAX} hex digits of it "
            "(`waypoint runs` shows each run's)"
        )
    return text  # type: ignore[return-value]


def check_json(name: str, value: Any) -> Any:
    """A JSON value the store can hold (JSONB): every key and string as check_text says, every
    number finite (Postgres JSON has no NaN or Infinity)."""
    if isinstance(value, str):
        check_text(name, value)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(f"a key of {name}", key, high=NAME_MAX)
            check_json(name, item)
    elif isinstance(value, list):
        for item in value:
            check_json(name, item)
    elif isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"{name} holds {value}, which JSON cannot: send a finite number")
    return value


def check_seq(name: str, value: int) -> int:
    """A step number or an event seq as a position: a whole number from 0 to INT_MAX (its column)."""
    return check_count(name, value, low=0, high=INT_MAX)


BUDGET_MAX: dict[str, int] = {
    "max_steps": INT_MAX,
    "max_tokens": BIGINT_MAX,
    "max_cost_usd": COST_MAX_USD,
    "deadline_seconds": DEADLINE_MAX_SECONDS,
}
_WHOLE = ("max_steps", "max_tokens")


def check_budget(limits: dict[str, int | float | None]) -> None:
    """A run's budget (`dataclasses.asdict(Budget)`): each limit set is above 0 and at most its
    BUDGET_MAX; steps and tokens are whole numbers."""
    for key, value in limits.items():
        if value is None:
            continue
        label, high = key.replace("_", " "), BUDGET_MAX[key]
        whole = key in _WHOLE
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
            raise InvalidInput(f"{label} must be a {'whole number' if whole else 'number'}, got {value!r}")
        if not 0 < value <= high:  # NaN fails too
            raise InvalidInput(f"{label} must be positive and at most {high}, got {value!r}")


def check_count(name: str, value: int, *, low: int = 1, high: int = 10_000) -> int:
    """A count such as a page size: a whole number from `low` to `high`."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{name} must be a whole number from {low} to {high}, got {value!r}")
    return value


DEFAULT_PRIORITY = 3  # the middle of Temporal's five priority keys, its default
PRIORITIES = range(1, 6)


def check_priority(priority: int | None) -> int | None:
    """A run's priority: 1 (first) to 5 (last), or None for the default (3)."""
    if priority is not None and (isinstance(priority, bool) or priority not in PRIORITIES):
        raise InvalidInput(f"invalid priority {priority!r}: a priority is 1 (first) to 5 (last); the default is 3")
    return priority


def check_port(value: int, setting: str) -> int:
    """A TCP port to listen on: 1 to 65535 (`setting` names where it came from, for the fix)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise InvalidInput(f"port {value!r} is out of range: use a port from 1 to 65535 ({setting})")
    return value


def check_choice(name: str, value: str, choices: type[StrEnum]) -> str:
    """A value of a closed set (a status, an event kind): one of `choices`."""
    if value not in {c.value for c in choices}:
        raise InvalidInput(f"unknown {name} {value!r}: use one of {', '.join(c.value for c in choices)}")
    return value


_AGE = re.compile(r"(\d+)([smhdw])")
_AGE_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
SELECT_KEYS = ("status", "agent", "since")
AGE_MAX_SECONDS = 1000 * 365 * 86_400  # older dates do not exist in Python (or in the runs)


def age_seconds(text: str) -> int | None:
    """`30m`, `12h`, `7d`, `2w` -> seconds; None when the text is not an age."""
    age = _AGE.fullmatch(text.strip())
    return None if age is None else int(age.group(1)) * _AGE_SECONDS[age.group(2)]


def parse_step(raw: str | int) -> int:
    """A step number as a user typed it."""
    try:
        step = int(raw)
    except (TypeError, ValueError):
        raise InvalidInput(f"a step is a whole number, got {raw!r}") from None
    if not 0 <= step <= INT_MAX:
        raise InvalidInput(f"a step is a whole number from 0 to {INT_MAX}, got {step}")
    return step


def parse_when(name: str, text: str, *, now: datetime | None = None) -> datetime:
    """A moment as a user typed it: an age back from now (`1h`, `7d`) or an ISO date or time
    (`2025-01-31`, `2025-01-31T09:30`, UTC unless it names its offset)."""
    seconds = age_seconds(text)
    if seconds is not None:
        if seconds > AGE_MAX_SECONDS:
            raise InvalidInput(f"{name}={text!r} is over a thousand years back: write a shorter age")
        return (now or datetime.now(UTC)) - timedelta(seconds=seconds)
    return iso_time(name, text, "an age such as 1h or 7d, or an ISO date such as 2025-01-31")


def iso_time(name: str, text: str, example: str) -> datetime:
    """An ISO date or date and time, UTC unless it names its offset; else InvalidInput asking for `example`."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(f"{name}={text!r}: write {example}") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


DELAY_MAX_SECONDS = 366 * 86_400  # a delayed run starts within a year (a schedule repeats for longer)


def check_start_time(
    start_at: datetime | float | None, after_seconds: float | None, *, now: datetime | None = None
) -> float | None:
    """When a delayed run starts, in epoch seconds (None: at once), from a moment (`start_at`: a
    datetime, UTC unless it has an offset, or epoch seconds) or a delay (`after_seconds`)."""
    now = now or datetime.now(UTC)
    if start_at is not None and after_seconds is not None:
        raise InvalidInput("give a start time or a delay, not both")
    if after_seconds is not None:
        if isinstance(after_seconds, bool) or not math.isfinite(after_seconds) or after_seconds < 0:
            raise InvalidInput(f"the delay must be 0 or more seconds, not {after_seconds!r}")
        if after_seconds > DELAY_MAX_SECONDS:
            raise InvalidInput(f"the delay {spoken_duration(after_seconds)} is more than a year: use a schedule")
        return now.timestamp() + after_seconds if after_seconds > 0 else None
    if start_at is None:
        return None
    if isinstance(start_at, datetime):
        when = start_at if start_at.tzinfo is not None else start_at.replace(tzinfo=UTC)
    elif isinstance(start_at, bool) or not math.isfinite(start_at):
        raise InvalidInput(f"the start time must be a date and time or epoch seconds, not {start_at!r}")
    else:
        when = datetime.fromtimestamp(start_at, UTC)
    if when < now - timedelta(seconds=1):  # a second of slack: "now" as the caller saw it
        raise InvalidInput(
            f"the start time is in the past: {when.isoformat(timespec='seconds')} "
            f"(now is {now.isoformat(timespec='seconds')})"
        )
    if (when - now).total_seconds() > DELAY_MAX_SECONDS:
        raise InvalidInput(
            f"the start time {when.isoformat(timespec='seconds')} is more than a year ahead: use a schedule"
        )
    return when.timestamp() if when > now else None


def parse_selection(text: str) -> dict[str, str | int]:
    """`status=completed agent=X since=7d` -> {"status": ..., "agent": ..., "since": seconds}."""
    found: dict[str, str | int] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if not sep or key not in SELECT_KEYS or not value:
            raise InvalidInput(
                f"cannot read {word!r} in the selection: write key=value words with keys "
                f'{", ".join(SELECT_KEYS)}, e.g. "status=completed agent=demo since=7d"'
            )
        if key == "since":
            seconds = age_seconds(value)
            if seconds is None or seconds > AGE_MAX_SECONDS:
                raise InvalidInput(f"since={value!r}: write an age such as 30m, 12h, 7d or 2w")
            found[key] = seconds
        else:
            found[key] = value
    if not found:
        raise InvalidInput('the selection is empty: say which runs, e.g. "status=completed since=7d"')
    return found


INSTRUCTIONS_MAX = 100_000  # characters: they travel in the run's start input (Temporal history)


def check_instructions(text: str | None) -> str | None:
    """Instructions that replace an agent's own (a rerun's): some text, within INSTRUCTIONS_MAX."""
    if text is None:
        return None
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("the instructions are empty: give the new system prompt as text")
    if len(text) > INSTRUCTIONS_MAX:
        raise InvalidInput(
            f"the instructions are {len(text)} characters: keep them under {INSTRUCTIONS_MAX} (they travel with a run)"
        )
    return check_text("the instructions", text, high=INSTRUCTIONS_MAX)


def read_text_file(path: str, fix: str) -> str:
    """The UTF-8 text of a file a command names, or one InvalidInput saying what is wrong and `fix`
    (what to pass instead)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(f"no file {path!r}: {fix}") from None
    except IsADirectoryError:
        raise InvalidInput(f"{path!r} is a folder: {fix}") from None
    except UnicodeDecodeError:
        raise InvalidInput(f"{path!r} is not UTF-8 text: save it as UTF-8") from None
    except OSError as exc:
        raise InvalidInput(f"cannot read {path!r} ({exc.strerror}): {fix}") from None


def read_instructions(path: str) -> str:
    """The text of an instructions file (`rerun --instructions FILE`), checked."""
    text = read_text_file(path, "pass --instructions the path of a text file")
    if not text.strip():
        raise InvalidInput(f"{path!r} is empty: write the new instructions in it")
    checked = check_instructions(text)
    assert checked is not None
    return checked


# --- scheduled agents ------------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")


def parse_duration(name: str, text: str | float) -> float:
    """A length of time as a user typed it: `30s`, `10m`, `1h`, `1d`, `2w`, or plain seconds."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    found = _DURATION.fullmatch(str(text).strip())
    if found is None:
        raise InvalidInput(f"{name}={text!r}: write a duration such as 30s, 10m, 1h or 1d")
    return float(found.group(1)) * _AGE_SECONDS[found.group(2) or "s"]


def duration_text(seconds: float) -> str:
    """Seconds as the largest whole unit that divides them: 3600 -> `1h`, 90 -> `90s`."""
    for unit in ("w", "d", "h", "m"):
        size = _AGE_SECONDS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


_SPOKEN_UNITS = (("year", 365 * 86400), ("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))


def spoken_duration(seconds: float) -> str:
    """Seconds as people say them, in the largest unit they fill, to a tenth at most:
    31,622,400 -> `1 year`, 90 -> `1.5 minutes`, 0.5 -> `0.5 seconds` (never `3.16224e+07`)."""
    if not math.isfinite(seconds):
        return f"{seconds} seconds"
    for unit, size in _SPOKEN_UNITS:
        if abs(seconds) >= size or unit == "second":
            value = round(seconds / size, 1)
            text = f"{value:.1f}".removesuffix(".0")
            return f"{text} {unit}" + ("" if text in ("1", "-1") else "s")
    raise AssertionError("unreachable")


def parse_until(name: str, text: str, *, now: datetime | None = None) -> datetime:
    """A moment ahead as a user typed it: a duration from now (`30d`) or an ISO date or time (UTC
    unless it names its offset)."""
    if _DURATION.fullmatch(text.strip()) and not text.strip().isdigit():
        return (now or datetime.now(UTC)) + timedelta(seconds=parse_duration(name, text))
    return iso_time(name, text, "a duration from now such as 30d, or an ISO date such as 2031-01-31")


def new_schedule_id() -> str:
    return f"sched-{uuid.uuid4().hex[:12]}"


EVERY_MIN_SECONDS = 1.0
EVERY_MAX_SECONDS = 366 * 86_400
CATCHUP_MIN_SECONDS = 10.0  # Temporal's smallest catch-up window
CATCHUP_MAX_SECONDS = 366 * 86_400
JITTER_MAX_SECONDS = 86_400
_CRON_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (field, lowest, highest, names for lowest onwards)
_CRON_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),  # 0 and 7 are Sunday
)


def _cron_value(raw: str, low: int, names: tuple[str, ...]) -> int | None:
    if raw.isdigit():
        return int(raw)
    lowered = raw.lower()
    return names.index(lowered) + low if lowered in names else None


def check_cron(expr: str) -> str:
    """A cron expression as Temporal Schedules read it: five fields (minute hour day-of-month month
    day-of-week; `*`, lists, ranges, `/steps`, month and day names) or a macro such as
    `@daily`. The time zone is a separate setting (`tz`), not a `CRON_TZ=` prefix."""
    check_text("the cron expression", expr, high=200)
    text = expr.strip()
    rule = "write five fields (minute hour day-of-month month day-of-week), e.g. '0 9 * * mon-fri', or @daily"
    if text.startswith("@"):
        if text.lower() not in _CRON_MACROS:
            raise InvalidInput(f"invalid cron expression {expr!r}: unknown macro; use one of {', '.join(_CRON_MACROS)}")
        return text
    fields = text.split()
    if len(fields) != 5:
        raise InvalidInput(f"invalid cron expression {expr!r}: {len(fields)} field(s); {rule}")
    for raw, (what, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        for item in raw.split(","):
            body, slash, step = item.partition("/")
            if slash and not (step.isdigit() and int(step) > 0):
                raise InvalidInput(
                    f"invalid cron expression {expr!r}: the step {step!r} of the {what} must be a whole number above 0"
                )
            if body == "*":
                continue
            ends = body.split("-")
            values = [_cron_value(e, low, names) for e in ends]
            if len(ends) > 2 or any(v is None or not low <= v <= high for v in values):
                raise InvalidInput(f"invalid cron expression {expr!r}: the {what} is {low} to {high}, got {item!r}")
    return text


def check_time_zone(tz: str) -> str:
    """An IANA time zone name (`Europe/Paris`, `UTC`)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    check_text("the time zone", tz, high=100)
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(f"unknown time zone {tz!r}: use an IANA name such as UTC or Europe/Paris") from None
    return tz


def check_seconds(name: str, value: float, low: float, high: float) -> float:
    """A length of time in seconds from `low` to `high`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise InvalidInput(f"{name} must be from {spoken_duration(low)} to {spoken_duration(high)}, got {value!r}")
    return float(value)


# --- webhooks ------------------------------------------------------------------------------------

WEBHOOK_URL_MAX = 2_048  # characters: what browsers and proxies reliably carry
# Names of cloud metadata services (GCP, AWS, Azure, Alibaba, OpenStack...): refused as hosts, as
# their addresses are, unless the settings allow private webhooks.
METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.com",
        "metadata.tencentyun.com",
        "metadata.platformequinix.com",
        "metadata.packet.net",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "192.0.0.192", "168.63.129.16")
)
_LINK_LOCAL = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))
WEBHOOK_ALLOW = "set WAYPOINT_WEBHOOK_ALLOW_PRIVATE=true to allow it"


def refused_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why a webhook may not reach `address` (a cloud metadata or link-local address), or None.
    An IPv4 address inside IPv6 (::ffff:169.254.169.254) is judged as the IPv4 one."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in METADATA_ADDRESSES:
        return f"a cloud metadata address ({address})"
    if any(address in net for net in _LINK_LOCAL):
        return f"a link-local address ({address})"
    return None


def _literal_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a host names without DNS: an IP literal, or an IPv4 address in a form the
    resolver reads as one (2852039166, 0xa9.0xfe.0xa9.0xfe, 169.254.43518)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if re.fullmatch(r"[0-9a-fA-FxX.]+", host) and any(c.isdigit() for c in host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def check_webhook(url: str | None, *, allow_private: bool = False) -> str | None:
    """A webhook URL (None passes): http or https, with a host, at most WEBHOOK_URL_MAX characters,
    and not a link-local or cloud metadata address (by name or IP) unless `allow_private`.
    Loopback and private networks (10/8, 192.168/16, ::1...) pass: a self-hosted Waypoint posts to
    services on its own network. The worker resolves the host again before each POST, so a name that
    resolves to a refused address is refused then (`refused_address`)."""
    if url is None:
        return None
    check_text("the webhook URL", url, high=WEBHOOK_URL_MAX)
    if url != url.strip() or any(c.isspace() for c in url):
        raise InvalidInput(f"invalid webhook URL {url!r}: it has spaces; give a URL such as https://example.com/hooks")
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise InvalidInput(
            f"invalid webhook URL {url!r}: not http or https; give a URL such as https://example.com/hooks"
        )
    try:
        host, _ = parts.hostname, parts.port
    except ValueError:
        raise InvalidInput(
            f"invalid webhook URL {url!r}: the port is out of range; use a port from 1 to 65535"
        ) from None
    if not host:
        raise InvalidInput(f"invalid webhook URL {url!r}: no host; give a URL such as https://example.com/hooks")
    if parts.username is not None or parts.password is not None:
        raise InvalidInput(
            f"invalid webhook URL {url!r}: it carries a user name or password; leave them out, "
            "and check the Waypoint-Signature header in the receiver instead"
        )
    if allow_private:
        return url
    name = host.rstrip(".").lower()
    if name in METADATA_NAMES:
        raise InvalidInput(
            f"invalid webhook URL {url!r}: it points at a cloud metadata service ({name}); {WEBHOOK_ALLOW}"
        )
    address = _literal_address(name)
    why = refused_address(address) if address is not None else None
    if why is not None:
        raise InvalidInput(f"invalid webhook URL {url!r}: it points at {why}; {WEBHOOK_ALLOW}")
    return url


def check_edited_input(tool: str, schema: dict[str, Any] | None, value: Any) -> dict[str, Any]:
    """An approval's edited tool input: a JSON object its tool's schema accepts (when the schema is
    known: an MCP tool's is checked when it runs). Mismatch names what the tool expects."""
    import json

    import jsonschema  # a dependency; imported here to keep this module light

    from waypoint.errors import Mismatch

    if not isinstance(value, dict):
        raise Mismatch(f"the edited input of {tool} must be a JSON object of its arguments, got {value!r}")
    if schema:
        errors = sorted(jsonschema.validators.validator_for(schema)(schema).iter_errors(value), key=str)
        if errors:
            problems = "; ".join(f"{e.json_path}: {e.message}" for e in errors[:3])
            raise Mismatch(
                f"the edited input of {tool} does not fit its arguments ({problems}): expected {json.dumps(schema)}"
            )
    return value


def check_deployment_version(deployment: str, build_id: str) -> tuple[str, str]:
    """A Worker Deployment name and build id as Temporal takes them: the name has no `.` (Temporal
    writes a version as `<deployment>.<build id>`), neither is empty or has spaces."""
    for what, value in (("the deployment name", deployment), ("the build id", build_id)):
        check_name(what, value)
        if not value or value != value.strip() or any(c.isspace() for c in value):
            raise InvalidInput(f"{what} {value!r} must be non-empty text without spaces, e.g. waypoint or v42")
    if "." in deployment:
        raise InvalidInput(
            f"the deployment name {deployment!r} has a '.': Temporal writes a version as <deployment>.<build id>, "
            "so pick a name without dots (the build id may have them)"
        )
    return deployment, build_id
