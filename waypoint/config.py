"""Waypoint's configuration: one typed class, read once from `WAYPOINT_*` variables.

Workflows and activities never read the environment themselves; the worker and
the CLI build a `Settings` and hand the pieces down.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from waypoint.access import Role
from waypoint.limits import Limits, load_limits
from waypoint.names import VersioningMode, WorkflowSandbox

# Signature algorithms a bearer token may use: asymmetric only, so the issuer's public keys can never
# verify a token someone signed with one of them as an HMAC secret.
ASYMMETRIC = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"})


class Settings(BaseSettings):
    """Every setting, read from its `WAYPOINT_` variable (docs/reference/configuration.md lists them all)."""

    model_config = SettingsConfigDict(env_prefix="WAYPOINT_", extra="ignore")

    state_dir: Path = Field(
        Path(".waypoint"),
        description="Folder of the embedded stack: Temporal's SQLite file, Postgres data, Qdrant shard, logs.",
    )
    temporal_address: str = Field(
        "localhost:7233",
        description="Temporal frontend host:port. The embedded dev server listens on this port.",
    )
    temporal_namespace: str = Field("default", description="Temporal namespace.")
    temporal_ui_port: int = Field(8233, description="Port of the embedded Temporal Web UI.")
    task_queue: str = Field("waypoint", description="Task queue the workers poll and runs are started on.")
    database_url: str | None = Field(
        None,
        description="Postgres URL (postgresql://user:pass@host/db). Unset: the embedded Postgres in the state folder.",
    )
    qdrant_url: str | None = Field(
        None, description="Qdrant server URL. Unset: the embedded engine (qdrant-edge) in `qdrant_path`."
    )
    qdrant_path: Path | None = Field(
        None, description="Folder of the embedded Qdrant shard. Default: <state_dir>/qdrant."
    )
    qdrant_api_key: SecretStr | None = Field(None, description="API key of the Qdrant server (with `qdrant_url`).")
    qdrant_collection: str = Field(
        "waypoint_episodes", description="Collection of episodic memory on a Qdrant server (with `qdrant_url`)."
    )
    embedder: str = Field(
        "hashing",
        description="Embedder of episodic memory: `hashing` (offline, lexical), `minilm` (the `embed` extra) "
        "or `openai:<model>` (an embeddings endpoint). A store keeps the embedder it was created with.",
    )
    memory: bool = Field(
        True,
        description="Episodic memory for runs. The worker that can open the store serves it on the "
        "`<task_queue>-memory` task queue; with the embedded shard that is one worker process.",
    )
    memory_request_timeout_seconds: float = Field(
        30.0, description="How long `waypoint memory ...` waits for the memory worker to answer."
    )
    agents: str = Field(
        "",
        description="Comma-separated module paths the worker imports agent definitions from "
        "(the built-in demo agent is always loaded).",
    )
    tenant: str = Field("default", description="Tenant id used by the CLI for new runs and listings.")
    workspace: Path | None = Field(
        None, description="Folder the file tools may read and write. Default: <state_dir>/workspace."
    )
    model: str | None = Field(
        None, description="Model spec overriding every agent's own, e.g. `openai:gpt-4o-mini` or `scripted`."
    )
    model_timeout_seconds: float = Field(120.0, description="Timeout of one model call.")
    prices: dict[str, tuple[float, ...]] = Field(
        default_factory=dict,
        description=(
            'Model prices in USD per million input/output tokens, JSON: {"my-model": [0.5, 1.5]}; '
            "two more numbers price cached input read and written: [0.5, 1.5, 0.05, 0.625]."
        ),
    )
    openai_api_key: SecretStr | None = Field(
        None,
        validation_alias=AliasChoices("WAYPOINT_OPENAI_API_KEY", "OPENAI_API_KEY"),
        description="API key for `openai:` models; read by the worker only.",
    )
    openai_base_url: str | None = Field(
        None,
        validation_alias=AliasChoices("WAYPOINT_OPENAI_BASE_URL", "OPENAI_BASE_URL"),
        description="Base URL of an OpenAI-compatible endpoint. Unset: the SDK's default.",
    )
    # Tracing and metrics (waypoint/telemetry/).
    tracing: bool = Field(True, description="Trace runs with OpenTelemetry; false turns spans off.")
    otlp_endpoint: str | None = Field(
        None,
        validation_alias=AliasChoices("WAYPOINT_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
        description="OTLP collector URL for spans and metrics. Unset: spans go to <state_dir>/traces/spans.jsonl.",
    )
    otlp_protocol: str = Field(
        "http/protobuf",
        pattern=r"^(grpc|http/protobuf)$",
        validation_alias=AliasChoices("WAYPOINT_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"),
        description="OTLP protocol: grpc or http/protobuf.",
    )
    trace_content: bool = Field(
        False, description="Record prompts and completions on model spans (secrets redacted). Off by default."
    )
    trace_ui_url: str | None = Field(
        None, description="Trace UI link template with {trace_id}, e.g. http://localhost:16686/trace/{trace_id}."
    )
    ui_secret: str | None = Field(
        None,
        description="Key signing the web viewer's session cookies and CSRF tokens; unset: a random one per process "
        "(sessions end when the server restarts).",
    )
    temporal_metrics: bool = Field(
        False, description="Export the Temporal SDK's own worker metrics to the OTLP endpoint as well."
    )
    # Single sign-on (waypoint/app/http/oidc.py, docs/guides/sso.md): bearer JWTs on /v1 and the Agent
    # Protocol, and the viewer's sign-in (authorization code with PKCE), both against one OIDC issuer.
    oidc_issuer: str | None = Field(
        None,
        description="OIDC issuer URL (its `iss`, exactly as its discovery document says it). Set: `/v1` and the "
        'Agent Protocol accept a bearer JWT it signed beside API keys, and the viewer offers "Sign in with '
        'SSO". Unset: API keys only.',
    )
    oidc_audience: str | None = Field(
        None,
        description="The `aud` a bearer token must carry (the API's identifier at the identity provider); "
        "unset: `oidc_client_id`. ID tokens of the viewer's sign-in are checked against `oidc_client_id`.",
    )
    oidc_client_id: str | None = Field(
        None, description="Client id of the viewer at the identity provider (its sign-in needs one)."
    )
    oidc_client_secret: SecretStr | None = Field(
        None,
        description="Client secret of the viewer, sent to the token endpoint when set; unset: a public client, "
        "PKCE only.",
    )
    oidc_scopes: str = Field(
        "openid profile email", description="Scopes the viewer's sign-in asks for (space-separated; `openid` first)."
    )
    oidc_tenant_claim: str = Field(
        "waypoint_tenant", description="Claim naming the caller's tenant (a string; a one-item list is accepted)."
    )
    oidc_tenant: str | None = Field(
        None,
        description="Tenant of a token without `oidc_tenant_claim` (one identity provider per tenant); unset: "
        "such a token is refused with 403.",
    )
    oidc_role_claim: str = Field(
        "waypoint_role",
        description="Claim holding the caller's role or groups: a string or a list of strings, each looked up "
        "in `oidc_roles`; the highest role found wins.",
    )
    oidc_roles: dict[str, Role] = Field(
        default_factory=dict,
        description='Claim values to roles, as JSON: `{"wp-admins": "admin", "sre": "operator"}`. Empty: the '
        "role names themselves (viewer, operator, admin).",
    )
    oidc_default_role: Role | None = Field(
        None,
        description="Role of a token whose claim maps to no role; unset: such a token is refused with 403.",
    )
    oidc_algorithms: str = Field(
        "RS256,ES256",
        description="Comma-separated signature algorithms a token may use (asymmetric only: RS*, PS*, ES*, "
        "EdDSA; `none` and HS* are refused).",
    )
    oidc_jwks_ttl_seconds: float = Field(
        3600, gt=0, description="How long the issuer's signing keys (JWKS) are kept before they are fetched again."
    )
    oidc_leeway_seconds: float = Field(
        30, ge=0, le=300, description="Clock skew allowed when checking a token's exp, nbf and iat."
    )
    # Sub-agents (Agent(agents=...)).
    max_parallel_agents: int = Field(
        8, ge=1, le=1_000, description="Sub-agent runs one run may have at once, whatever its agent asks for."
    )
    tenant_parallel_agents: dict[str, int] = Field(
        default_factory=dict,
        description='Per-tenant caps in place of max_parallel_agents, as JSON: {"acme": 4}.',
    )
    # Fleet flow control (waypoint/limits.py, waypoint/store/limits.py).
    limits_file: Path | None = Field(
        None,
        description="TOML file of fleet limits: per model key calls in flight, requests and tokens a minute; "
        "per tenant runs at once and a fair-share weight; the circuit breaker. Unset: no limits.",
    )
    limit_lease_seconds: float = Field(
        6.0,
        ge=1,
        le=300,
        description="How long a model call's limiter slot lasts unless its worker renews it: a worker that dies "
        "gives its slots back after this.",
    )
    budget_output_tokens: int = Field(
        4096,
        ge=16,
        le=1_000_000,
        description="Budget pools: the most output tokens a model call of a run with a budget (its tree's, its "
        "tenant's day) reserves and asks the model for (max_tokens); a pool with less room left cuts it to that.",
    )
    http_requests_per_second: float | None = Field(
        None,
        gt=0,
        le=100_000,
        description="HTTP API requests a second per API key, per API process (a burst of twice that, at least "
        "1); over it: 429 with Retry-After. Unset: no limit.",
    )
    http_open_streams: int | None = Field(
        None,
        gt=0,
        le=100_000,
        description="Live streams (SSE) one API key may hold open at once, per API process; one more: 429 with "
        "Retry-After. Unset: no limit.",
    )
    # Compaction (waypoint/compaction.py, workflows/compaction.py).
    compaction_schedule_id: str = Field("waypoint-compaction", description="Id of the compaction Schedule.")
    compaction_interval_seconds: float = Field(
        900.0, gt=0, description="Seconds between scheduled compaction passes (overlapping passes are skipped)."
    )
    compaction_threshold_tokens: int = Field(
        8_000, gt=0, description="A run is compacted once its history after its last compaction passes this."
    )
    compaction_concurrency: int = Field(4, gt=0, description="Runs compacted at once by one pass.")
    compaction_max_runs: int = Field(100, gt=0, description="Runs compacted at most by one pass (largest first).")
    compaction_keep_steps: int = Field(
        2, ge=0, description="Newest steps a compaction leaves verbatim (outside its range)."
    )
    compaction_oversize_tokens: int = Field(
        2_000, gt=0, description="Tool outputs over this are replaced by their summary and a reference."
    )
    compaction_summary_tokens: int = Field(1_200, gt=0, description="Size budget of a compaction summary.")
    codec_keys: SecretStr | None = Field(
        None,
        description="AES-GCM keys that encrypt Temporal payloads, `id:base64key,...`, newest last "
        "(it encrypts; every key decrypts). Unset: payloads are not encrypted.",
    )
    codec_ui_origin: str = Field(
        "http://localhost:8233",
        description="Origin of the Temporal Web UI that `waypoint codec-server` answers (CORS).",
    )
    # Waypoint as an MCP server (`waypoint mcp`, waypoint/app/mcp_server.py).
    mcp_write: bool = Field(
        False,
        description="`waypoint mcp` also offers the tools that act: start_run, send_message, approve, deny, "
        "cancel_run, fork_run. Off: read-only.",
    )
    mcp_api_key: SecretStr | None = Field(
        None,
        description="Bearer key requests to `waypoint mcp --transport http` may carry (besides Waypoint API "
        "keys); it acts as an admin of `WAYPOINT_TENANT`. Required for HTTP (stdio acts for the configured tenant).",
    )
    api_key: SecretStr | None = Field(
        None,
        description="A Waypoint API key the CLI acts as: its tenant and role (`waypoint keys create --role`). "
        "Unset: the CLI acts as the installation's own admin, for every tenant.",
    )
    # The HTTP API (waypoint/app/http/) and live streams.
    api_host: str = Field("127.0.0.1", description="Address `waypoint serve` (and `waypoint dev`) listens on.")
    api_port: int = Field(
        8000,
        description="Port of the HTTP API. `waypoint dev` takes a free one when the default is in use "
        "and this is not set.",
    )
    api_cors_origins: str = Field(
        "", description="Comma-separated origins browsers may call the HTTP API from (CORS); empty: none."
    )
    api_max_body_bytes: int = Field(
        1_048_576, gt=0, description="Largest request body the HTTP API reads; a larger one is refused with 413."
    )
    api_stream_buffer: int = Field(
        1_000,
        gt=0,
        description="Events and deltas a stream holds for one slow client; past it the client is cut off "
        "(it reconnects with Last-Event-ID), so a slow client never slows a run.",
    )
    api_keepalive_seconds: float = Field(
        15.0, gt=0, description="Seconds between keep-alive comments on a quiet stream."
    )
    webhook_allow_private: bool = Field(
        False,
        description="Webhooks may post to link-local and cloud metadata addresses (169.254.0.0/16, fe80::/10, "
        "169.254.169.254, metadata.google.internal...). Loopback and private networks are always allowed.",
    )
    webhook_retry_window_seconds: float = Field(
        86_400,
        ge=1,
        le=30 * 86_400,
        description="How long a webhook delivery is retried (backoff 1 s doubling, at most an hour apart) before "
        "it goes on the dead-letter list (`waypoint webhooks list --failed`). Read by the worker.",
    )
    idempotency_retention_seconds: float = Field(
        86_400,
        gt=0,
        description="How long a start's idempotency key answers the run it started; after it the key starts a new run.",
    )
    model_deltas: bool = Field(
        True, description="Workers publish model token deltas while a streaming model call runs (live streams)."
    )
    model_delta_flush_ms: int = Field(
        40, ge=1, description="Workers send a model call's deltas in batches, at most one per this many ms."
    )
    # Worker limits (Temporal's Worker options; benchmarks/many_runs.py measured them on 2 cores).
    worker_max_cached_workflows: int = Field(
        1_000, ge=0, description="Runs a worker keeps in its sticky cache (memory grows with it; 0: none)."
    )
    worker_max_concurrent_workflow_tasks: int = Field(100, ge=1, description="Workflow tasks a worker runs at once.")
    worker_max_concurrent_activities: int = Field(
        1_000,
        ge=1,
        description="Activities a worker runs at once. Model calls mostly wait on the provider, so a "
        "worker holds many; 1,000 runs waiting on a 30 s model fit in 450 MiB.",
    )
    worker_stop_grace_seconds: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="On Ctrl-C or SIGTERM, activities in flight get this long to finish, then are cancelled; "
        "5 s later the worker stops whatever its runs are doing (Temporal retries their work later).",
    )
    # Worker Versioning (Temporal Worker Deployments); README "Deploying new versions".
    worker_deployment: str | None = Field(
        None,
        description="Worker Deployment the worker joins (unset: an unversioned worker). Its runs go to it once "
        "`waypoint deployment set-current` makes its version current.",
    )
    worker_build_id: str | None = Field(
        None, description="Build id of the worker's deployment version (unset: a hash of Waypoint's code)."
    )
    worker_versioning: VersioningMode = Field(
        VersioningMode.AUTO_UPGRADE,
        description="auto-upgrade: an open run moves to the next current version at its next workflow task "
        "(Waypoint guards workflow changes with patches; `waypoint check-deploy` proves they replay); "
        "pinned: a run stays on the version it started on.",
    )
    workflow_sandbox: WorkflowSandbox = Field(
        WorkflowSandbox.PASSTHROUGH,
        description="passthrough: Waypoint's own modules are imported once and shared by the workflow runs "
        "of a worker (each run's first task skips re-importing them); full: imported afresh in the "
        "workflow sandbox for each run, every call in them checked.",
    )
    # Opened as needed and kept: an overflow connection is closed when it comes back, and the next
    # one costs Postgres a new backend, cold catalog caches and every statement prepared again (at
    # 10 runs at once with 5 + 10, about 0.25 new connections a step and a third of Postgres' CPU).
    db_pool_size: int = Field(15, ge=1, description="Postgres connections each process may keep open.")
    db_max_overflow: int = Field(
        0, ge=0, description="Extra Postgres connections a process may open under load, closed after use."
    )
    db_statement_timeout_ms: int = Field(
        60_000, ge=0, description="Postgres statement_timeout of Waypoint's connections, in ms (0: none)."
    )

    @field_validator("tenant")
    @classmethod
    def _tenant_id(cls, value: str) -> str:
        from waypoint.checks import check_tenant
        from waypoint.errors import InvalidInput

        try:
            return check_tenant(value)
        except InvalidInput as exc:  # pydantic reports a ValueError with the setting's name
            raise ValueError(str(exc)) from None

    @field_validator("oidc_algorithms")
    @classmethod
    def _oidc_algorithms(cls, value: str) -> str:
        names = [a.strip() for a in value.split(",") if a.strip()]
        refused = [a for a in names if a.lower() == "none" or a.upper().startswith("HS") or a not in ASYMMETRIC]
        if refused or not names:
            raise ValueError(
                f"{', '.join(refused) or 'no algorithm'}: set WAYPOINT_OIDC_ALGORITHMS to asymmetric ones "
                f"from {', '.join(sorted(ASYMMETRIC))}"
            )
        return ",".join(names)

    @field_validator("oidc_issuer")
    @classmethod
    def _oidc_issuer(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("https://", "http://")):
            raise ValueError(f"{value!r} is no URL: set WAYPOINT_OIDC_ISSUER to the issuer's https:// URL")
        return value or None

    @model_validator(mode="after")
    def _oidc_audience(self) -> Settings:
        if self.oidc_issuer and not (self.oidc_audience or self.oidc_client_id):
            raise ValueError(
                "WAYPOINT_OIDC_ISSUER is set, but no audience to check tokens against: set WAYPOINT_OIDC_AUDIENCE "
                "(bearer tokens) or WAYPOINT_OIDC_CLIENT_ID (the viewer's sign-in)"
            )
        return self

    @field_validator("api_port")
    @classmethod
    def _api_port(cls, value: int) -> int:
        from waypoint.checks import check_port
        from waypoint.errors import InvalidInput

        try:
            return check_port(value, "set WAYPOINT_API_PORT")
        except InvalidInput as exc:
            raise ValueError(str(exc)) from None

    @property
    def limits(self) -> Limits:
        """The fleet limits of `limits_file`, read once per file (a bad file raises ConfigError naming
        the entry). Cached by the file, not on the instance: a copy with another file reads that one."""
        return _limits_of(self.limits_file)

    def parallel_agents_cap(self, tenant_id: str) -> int:
        """How many sub-agent runs one run of this tenant may have at once."""
        cap = self.tenant_parallel_agents.get(tenant_id, self.max_parallel_agents)
        return max(1, min(cap, 1_000))

    def child_environment(self, **extra: str) -> dict[str, str]:
        """The environment of a Waypoint subprocess (a worker, the CLI) that sees exactly these
        settings: this process's environment minus every WAYPOINT_/OPENAI_ variable, then each
        setting that has a value, then `extra`."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WAYPOINT_", "OPENAI_"))}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            elif isinstance(value, dict):
                value = json.dumps(value)
            env[f"WAYPOINT_{name.upper()}"] = str(value)
        return env | extra

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # SecretStr fields mask themselves; a password inside the database URL needs help.
        for name, value in super().__repr_args__():
            if name == "database_url" and isinstance(value, str):
                value = re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", value)
            yield name, value

    @property
    def resolved_qdrant_path(self) -> Path:
        return (self.qdrant_path or self.state_dir / "qdrant").resolve()

    @property
    def resolved_workspace(self) -> Path:
        return (self.workspace or self.state_dir / "workspace").resolve()

    @property
    def agent_modules(self) -> list[str]:
        return [m.strip() for m in self.agents.split(",") if m.strip()]

    @property
    def oidc_algorithm_list(self) -> list[str]:
        return [a.strip() for a in self.oidc_algorithms.split(",") if a.strip()]

    @property
    def cors_origins(self) -> list[str]:
        return [o.strip() for o in self.api_cors_origins.split(",") if o.strip()]

    @property
    def temporal_port(self) -> int:
        _, _, port = self.temporal_address.rpartition(":")
        return int(port)


@functools.lru_cache(maxsize=8)
def _limits_of(path: Path | None) -> Limits:
    return load_limits(path)
