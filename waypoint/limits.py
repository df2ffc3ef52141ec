"""Fleet limits: what the shared limiter (waypoint/store/limits.py) enforces, declared once.

A TOML file named by `WAYPOINT_LIMITS_FILE`, read by every worker (and by the CLI and the HTTP API,
for a run's fairness weight), for example:

    [models."openai:gpt-4o-mini"]        # one model key: provider:model
    in_flight = 8                        # calls at once, across every worker
    requests_per_minute = 500
    tokens_per_minute = 200000

    [models."anthropic:*"]               # every model of a provider shares this one budget
    in_flight = 4

    [models."openai:gpt-4o@TEAM2_OPENAI_KEY"]   # calls made with one API key (its variable's name)
    requests_per_minute = 60

    [tenants.acme]
    runs = 20                            # runs with a model call in flight at once
    weight = 3                           # its share of a busy key: 3 to every weight-1 tenant's 1
    tokens_per_day = 5000000             # every run of the tenant, a UTC day (waypoint/store/budget.py)
    cost_per_day = 40.0                  # USD, a UTC day
    budget_wait = "wait"                 # a run that reaches them waits for the next day ("fail": it ends)

    [breaker]                            # per model key: retryable failures in a row that open it
    failures = 5
    open_seconds = 30

A model call's key is the most specific entry that names it (`provider:model@KEY`, then
`provider:model`, then `provider:*@KEY`, then `provider:*`); an entry is one budget, shared by every
model it covers. Models no entry names are not limited, but still share cooldowns and a breaker when
a limits file is set. Every bad entry is refused when the file is read, naming it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from waypoint.errors import ConfigError
from waypoint.names import Provider

TENANT_KEY_PREFIX = "tenant:"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelLimit(_Strict):
    in_flight: int | None = Field(None, gt=0, le=100_000)
    requests_per_minute: int | None = Field(None, gt=0, le=10_000_000)
    tokens_per_minute: int | None = Field(None, gt=0, le=10_000_000_000)


class TenantLimit(_Strict):
    runs: int | None = Field(None, gt=0, le=100_000)
    weight: float = Field(1.0, gt=0, le=1000)
    # A budget for every run of the tenant together, per UTC day; a run that reaches it waits for the
    # next day or ends `budget_exceeded`, as budget_wait says.
    tokens_per_day: int | None = Field(None, gt=0, le=10**15)
    cost_per_day: float | None = Field(None, gt=0, le=10**9)
    budget_wait: Literal["wait", "fail"] = "fail"

    @property
    def has_daily_budget(self) -> bool:
        return self.tokens_per_day is not None or self.cost_per_day is not None


class BreakerLimit(_Strict):
    failures: int = Field(5, gt=0, le=1000)
    open_seconds: float = Field(30.0, gt=0, le=86_400)


class _LimitsFile(_Strict):
    models: dict[str, ModelLimit] = Field(default_factory=dict)
    tenants: dict[str, TenantLimit] = Field(default_factory=dict)
    breaker: BreakerLimit = Field(default_factory=lambda: BreakerLimit.model_validate({}))


@dataclass(frozen=True)
class Limits:
    """The parsed limits; `Limits()` is no limits at all (no file)."""

    models: dict[str, ModelLimit] = field(default_factory=dict)
    tenants: dict[str, TenantLimit] = field(default_factory=dict)
    breaker: BreakerLimit = field(default_factory=lambda: BreakerLimit.model_validate({}))
    source: str | None = None  # the file they came from

    @property
    def enabled(self) -> bool:
        return self.source is not None

    def model_key(self, spec: str, key_env: str | None = None) -> tuple[str, ModelLimit | None]:
        """The limiter key of a call to `spec` made with the key in `key_env`, and its entry (None:
        not limited; the key is still the one its cooldown and breaker are kept under)."""
        provider, _, name = spec.partition(":")
        candidates = [f"{provider}:{name}", f"{provider}:*"]
        if key_env:
            candidates = [f"{provider}:{name}@{key_env}", candidates[0], f"{provider}:*@{key_env}", candidates[1]]
        for key in candidates:
            if key in self.models:
                return key, self.models[key]
        return f"{provider}:{name}", None

    def weight(self, tenant_id: str) -> float:
        entry = self.tenants.get(tenant_id)
        return entry.weight if entry is not None else 1.0

    def tenant_runs(self, tenant_id: str) -> int | None:
        entry = self.tenants.get(tenant_id)
        return entry.runs if entry is not None else None

    def daily_budget(self, tenant_id: str) -> TenantLimit | None:
        """The tenant's entry if it sets a daily budget (tokens_per_day, cost_per_day), else None."""
        entry = self.tenants.get(tenant_id)
        return entry if entry is not None and entry.has_daily_budget else None

    def check_tenants(self, known: set[str]) -> None:
        """Refuse an entry for a tenant nothing knows (no API key, not the CLI's tenant): a typo would
        otherwise give a real tenant no limit at all."""
        for name in self.tenants:
            if name not in known:
                raise ConfigError(
                    f"limits file {self.source}: [tenants.{name}]: no tenant {name!r} is known (no API key has it); "
                    f"create a key with `waypoint keys create --tenant {name}` or fix the name"
                )


def load_limits(path: Path | None) -> Limits:
    """The limits in `path` (None: no limits). Every problem is a ConfigError naming the entry."""
    if path is None:
        return Limits()
    where = f"limits file {path}"
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({exc.strerror}); fix WAYPOINT_LIMITS_FILE") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where} is not valid TOML: {exc}") from None
    try:
        parsed = _LimitsFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {_first_problem(exc)}") from None
    for key in parsed.models:
        _check_key(where, key)
    return Limits(models=parsed.models, tenants=parsed.tenants, breaker=parsed.breaker, source=str(path))


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    loc = [str(part) for part in error["loc"]]
    entry = _entry_name(loc)
    message = error["msg"]
    if error["type"] == "extra_forbidden":
        known = {
            "models": "in_flight, requests_per_minute, tokens_per_minute",
            "tenants": "runs, weight, tokens_per_day, cost_per_day, budget_wait",
            "breaker": "failures, open_seconds",
        }
        if len(loc) == 1:
            return f"unknown section [{loc[0]}] (known: models, tenants, breaker)"
        return f"{entry}: unknown setting {loc[-1]!r} (known: {known.get(loc[0], '')})"
    value: Any = error.get("input")
    return f"{entry}: {message.lower()} (got {value!r})"


def _entry_name(loc: list[str]) -> str:
    if len(loc) >= 3:
        return f'[{loc[0]}."{loc[1]}"] {loc[2]}'
    if len(loc) == 2:
        return f"[{loc[0]}] {loc[1]}"
    return f"[{loc[0]}]" if loc else "the file"


def _check_key(where: str, key: str) -> None:
    provider, sep, rest = key.partition(":")
    name, _, key_env = rest.partition("@")
    known = ", ".join(p.value for p in Provider if p != Provider.SCRIPTED)
    if not sep or not name or provider not in {p.value for p in Provider} or provider == Provider.SCRIPTED:
        raise ConfigError(
            f'{where}: [models."{key}"]: a model key is provider:model, provider:*, or either with @KEY_VARIABLE '
            f"(providers: {known})"
        )
    if "@" in rest and not key_env.replace("_", "").isalnum():
        raise ConfigError(f'{where}: [models."{key}"]: after @ comes the name of the API key\'s variable')


def tenant_key(tenant_id: str) -> str:
    return f"{TENANT_KEY_PREFIX}{tenant_id}"
