"""The shared limiter in Postgres (waypoint/store/limits.py), and the limits file it enforces.

Each test uses keys of its own (a uuid in the model name), so they share the session's database."""

from __future__ import annotations

import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from tests.helpers import eventually
from waypoint.errors import ConfigError
from waypoint.limits import BreakerLimit, Limits, ModelLimit, TenantLimit, load_limits
from waypoint.names import WaitReason
from waypoint.store import RunStore
from waypoint.store.limits import CapacityAsk, Lease
from waypoint.store.schema import capacity_leases
from waypoint.types import CapacityWait

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]
LEASE = 30.0


def model() -> str:
    return f"openai:m-{uuid.uuid4().hex[:8]}"


def ask(key: str, run: str, *, tenant: str = "a", priority: int = 3, **kw: Any) -> CapacityAsk:
    fields = {"step": 1, "tokens": 10, "breaker": True, **kw}
    return CapacityAsk(run_id=run, tenant_id=tenant, model_key=key, priority=priority, **fields)


def limits(key: str, **entry: int) -> Limits:
    return Limits(models={key: ModelLimit(**entry)}, source="test")


async def test_calls_in_flight_wait_in_line_and_a_release_names_who_fits_now(store: RunStore) -> None:
    key = model()
    lim = limits(key, in_flight=2)
    first = await store.limiter.acquire(ask(key, "r1"), lim, LEASE)
    second = await store.limiter.acquire(ask(key, "r2"), lim, LEASE)
    assert isinstance(first, Lease) and isinstance(second, Lease) and first.key == key
    third = await store.limiter.acquire(ask(key, "r3"), lim, LEASE)
    fourth = await store.limiter.acquire(ask(key, "r4"), lim, LEASE)
    assert isinstance(third, CapacityWait) and third.reason == WaitReason.IN_FLIGHT and third.position == 1
    assert isinstance(fourth, CapacityWait) and fourth.position == 2
    # A newcomer does not jump the line, and a waiter asking again keeps its place.
    assert (await store.limiter.acquire(ask(key, "r5"), lim, LEASE)).position == 3  # type: ignore[union-attr]
    assert (await store.limiter.acquire(ask(key, "r3"), lim, LEASE)).position == 1  # type: ignore[union-attr]
    assert await store.limiter.release(first, lim, 25) == ["r3", "r4", "r5"]  # r3 fits; r4 and r5 stand by next
    assert isinstance(await store.limiter.acquire(ask(key, "r4"), lim, LEASE), CapacityWait)  # r3 is first
    assert isinstance(await store.limiter.acquire(ask(key, "r3"), lim, LEASE), Lease)
    # A retried attempt of a call that holds its slot takes the same slot, not a second one.
    assert isinstance(await store.limiter.acquire(ask(key, "r2", attempt=2), lim, LEASE), Lease)
    assert isinstance(await store.limiter.acquire(ask(key, "r6", attempt=2), lim, LEASE), CapacityWait)  # holds none
    assert await store.limiter.waiting_positions(["r4", "r5"], lim) == {"r4": 1, "r5": 2}


async def test_a_slot_whose_worker_stopped_renewing_comes_back(store: RunStore) -> None:
    """Leases long enough that a busy machine's slow round trip never outlasts one by chance; the
    clock that decides when one has run out is Postgres's, asked, not slept on."""
    key = model()
    lim = limits(key, in_flight=1)
    held = await store.limiter.acquire(ask(key, "dead"), lim, LEASE)
    assert isinstance(held, Lease)
    assert isinstance(await store.limiter.acquire(ask(key, "next"), lim, LEASE), CapacityWait)
    await store.limiter.renew(held, 1.0)  # its last renewal; then its worker died: nobody renews the lease
    last = await _expiry(store, held)
    await eventually(lambda: _past(store, last), what="the lease running out")
    assert isinstance(await store.limiter.acquire(ask(key, "next"), lim, LEASE), Lease)
    # A renewed lease stays past the expiry it was granted with.
    key2 = model()
    lim2 = limits(key2, in_flight=1)
    kept = await store.limiter.acquire(ask(key2, "alive"), lim2, 1.0)
    assert isinstance(kept, Lease)
    granted = await _expiry(store, kept)
    await store.limiter.renew(kept, LEASE)
    await eventually(lambda: _past(store, granted), what="the expiry the lease was granted with passing")
    assert isinstance(await store.limiter.acquire(ask(key2, "other"), lim2, 1.0), CapacityWait)


async def _expiry(store: RunStore, lease: Lease) -> datetime:
    async with store.engine.connect() as conn:
        found: datetime = await conn.scalar(
            select(capacity_leases.c.expires_at).where(
                capacity_leases.c.key == lease.key, capacity_leases.c.lease_id == lease.lease_id
            )
        )
    return found


async def _past(store: RunStore, moment: datetime) -> bool:
    """Postgres's clock, which the limiter reads, has passed `moment`."""
    async with store.engine.connect() as conn:
        return bool(await conn.scalar(select(func.clock_timestamp() > moment)))


async def test_requests_and_tokens_a_minute(store: RunStore) -> None:
    key = model()
    lim = limits(key, requests_per_minute=2)
    for run in ("r1", "r2"):
        lease = await store.limiter.acquire(ask(key, run), lim, LEASE)
        assert isinstance(lease, Lease)
        await store.limiter.release(lease, lim, 5)
    wait = await store.limiter.acquire(ask(key, "r3"), lim, LEASE)
    assert isinstance(wait, CapacityWait) and wait.reason == WaitReason.REQUESTS
    assert 50 < wait.retry_after <= 60  # when the oldest of the minute's requests ages out
    key = model()
    lim = limits(key, tokens_per_minute=1000)
    lease = await store.limiter.acquire(ask(key, "t1", tokens=600), lim, LEASE)
    assert isinstance(lease, Lease)
    wait = await store.limiter.acquire(ask(key, "t2", tokens=600), lim, LEASE)
    assert isinstance(wait, CapacityWait) and wait.reason == WaitReason.TOKENS
    await store.limiter.release(lease, lim, 100)  # it used less than asked: the minute has room again
    assert isinstance(await store.limiter.acquire(ask(key, "t2", tokens=600), lim, LEASE), Lease)


async def test_the_line_is_by_priority_then_fair_share_by_weight(store: RunStore) -> None:
    key = model()
    lim = Limits(models={key: ModelLimit(in_flight=1)}, tenants={"b": TenantLimit(weight=2)}, source="test")
    held = await store.limiter.acquire(ask(key, "busy"), lim, LEASE)
    assert isinstance(held, Lease)
    for i in range(6):  # tenant a came first with six calls
        await store.limiter.acquire(ask(key, f"a{i}", tenant="a"), lim, LEASE)
    for i in range(3):
        await store.limiter.acquire(ask(key, f"b{i}", tenant="b"), lim, LEASE)
    await store.limiter.acquire(ask(key, "urgent", tenant="a", priority=1), lim, LEASE)
    runs = ["busy", *(f"a{i}" for i in range(6)), *(f"b{i}" for i in range(3)), "urgent"]
    places = await store.limiter.waiting_positions(runs, lim)
    order = sorted(places, key=lambda r: places[r])
    assert order[0] == "urgent"
    # Weight 2 against 1: two of b's calls for each of a's, whatever a's line length.
    # Tenant a has a call in flight already; b's weight is 2: b's three come first, then a's in order.
    assert order[1:] == ["b0", "b1", "b2", "a0", "a1", "a2", "a3", "a4", "a5"], order


async def test_a_tenant_run_cap_counts_its_calls_on_every_key(store: RunStore) -> None:
    k1, k2 = model(), model()
    tenant = f"t{uuid.uuid4().hex[:6]}"
    lim = Limits(
        models={k1: ModelLimit(in_flight=10), k2: ModelLimit(in_flight=10)},
        tenants={tenant: TenantLimit(runs=2)},
        source="test",
    )
    assert isinstance(await store.limiter.acquire(ask(k1, "x1", tenant=tenant), lim, LEASE), Lease)
    assert isinstance(await store.limiter.acquire(ask(k2, "x2", tenant=tenant), lim, LEASE), Lease)
    wait = await store.limiter.acquire(ask(k1, "x3", tenant=tenant), lim, LEASE)
    assert isinstance(wait, CapacityWait) and wait.reason == WaitReason.TENANT and wait.position == 1
    # Another tenant is not held back by it.
    assert isinstance(await store.limiter.acquire(ask(k1, "y1", tenant="other"), lim, LEASE), Lease)


async def test_a_cooldown_pauses_the_key_for_everyone_and_the_breaker_opens_and_closes(store: RunStore) -> None:
    key = model()
    lim = Limits(breaker=BreakerLimit(failures=2, open_seconds=30), source="test")
    assert (await store.limiter.acquire(ask(key, "c1"), lim, LEASE)) == Lease("c1:1", None)  # not limited: no slot
    await store.limiter.cool_down(key, 20, "429 from the provider")
    wait = await store.limiter.acquire(ask(key, "c2"), lim, LEASE)
    assert isinstance(wait, CapacityWait) and wait.reason == WaitReason.COOLDOWN and 15 < wait.retry_after <= 20
    await store.limiter.cool_down(key, 5, "a shorter one")  # a longer cooldown stays
    assert (await store.limiter.acquire(ask(key, "c2"), lim, LEASE)).retry_after > 15  # type: ignore[union-attr]

    key = model()
    for _ in range(2):
        await store.limiter.key_outcome(key, failed=True, throttled=False, breaker=lim.breaker)
    wait = await store.limiter.acquire(ask(key, "b1"), lim, LEASE)
    assert isinstance(wait, CapacityWait) and wait.reason == WaitReason.BREAKER
    # A call with no model to fail over to is not held by the breaker: it keeps its own retries.
    assert isinstance(await store.limiter.acquire(ask(key, "b2", breaker=False), lim, LEASE), Lease)
    assert await store.limiter.recovered([key], lim.breaker) is None
    # someone's call got through
    await store.limiter.key_outcome(key, failed=False, throttled=False, breaker=lim.breaker)
    assert isinstance(await store.limiter.acquire(ask(key, "b1"), lim, LEASE), Lease)
    assert await store.limiter.recovered([key], lim.breaker) == key
    health = {h.key: h for h in await store.limiter.key_health()}
    assert health[key].requests == 3 and health[key].failures == 0


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[models.openai\n", "not valid TOML"),
        ('[models."gpt-4o"]\nin_flight = 2\n', "a model key is provider:model"),
        (
            '[models."openai:gpt-4o"]\nin_flight = 0\n',
            '[models."openai:gpt-4o"] in_flight: input should be greater than 0',
        ),
        ('[models."openai:gpt-4o"]\nin_flight = -3\n', "greater than 0"),
        ('[models."openai:gpt-4o"]\nrpm = 3\n', "unknown setting 'rpm' (known: in_flight, requests_per_minute"),
        ("[tenants.acme]\nweight = 0\n", '[tenants."acme"] weight'),
        ("[queues]\nx = 1\n", "unknown section [queues]"),
    ],
)
def test_a_bad_limits_file_is_refused_naming_the_entry(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "limits.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_limits(path)
    assert says in str(caught.value) and str(path) in str(caught.value)


def test_a_call_s_key_is_the_most_specific_entry() -> None:
    lim = Limits(
        models={
            "openai:*": ModelLimit(in_flight=9),
            "openai:gpt-4o": ModelLimit(in_flight=5),
            "openai:gpt-4o@TEAM2_KEY": ModelLimit(in_flight=1),
        },
        source="test",
    )
    assert lim.model_key("openai:gpt-4o", "TEAM2_KEY")[0] == "openai:gpt-4o@TEAM2_KEY"
    assert lim.model_key("openai:gpt-4o", None)[0] == "openai:gpt-4o"
    assert lim.model_key("openai:o3", None)[0] == "openai:*"
    assert lim.model_key("anthropic:claude", None) == ("anthropic:claude", None)
    with pytest.raises(ConfigError, match="no tenant 'acme' is known"):
        Limits(tenants={"acme": TenantLimit()}, source="f").check_tenants({"default"})


async def test_a_call_standing_by_is_told_by_notification_not_signalled(store: RunStore, database_url: str) -> None:
    """Next in line, a call stands by in its activity: the release that frees a slot for it names it
    on the capacity channel and leaves it out of the runs to signal; the one behind it is signalled,
    to stand by in its turn."""
    from waypoint.store.limits import CAPACITY_CHANNEL
    from waypoint.store.listen import Listener

    key = model()
    lim = limits(key, in_flight=1)
    heard: list[str] = []
    listener = await Listener(database_url, {CAPACITY_CHANNEL: heard.append}).start()
    try:
        held = await store.limiter.acquire(ask(key, "s1"), lim, LEASE)
        assert isinstance(held, Lease)
        first = await store.limiter.acquire(ask(key, "s2"), lim, LEASE, standby_seconds=30)
        second = await store.limiter.acquire(ask(key, "s3"), lim, LEASE, standby_seconds=30)
        assert (first.position, second.position) == (1, 2)  # type: ignore[union-attr]
        assert await store.limiter.release(held, lim, 5) == ["s3"]  # s2 stands by (in line for the slot): not signalled
        # A notification sent after the release comes after every one the release sent (Postgres
        # delivers them in commit order): once it is heard, nothing else of the release is to come.
        marker = f"{model()} nobody"  # shaped as the limiter's own, of a key nobody uses
        async with store.engine.begin() as conn:
            await conn.execute(select(func.pg_notify(CAPACITY_CHANNEL, marker)))
        await eventually(lambda: _heard(heard, marker), what="the marker notification")
        assert heard == [f"{key} s2:1", marker]
    finally:
        await listener.close()


def test_settings_read_their_own_limits_file(tmp_path: Path) -> None:
    from waypoint.config import Settings

    path = tmp_path / "limits.toml"
    path.write_text('[models."openai:x"]\nin_flight = 2\n')
    plain = Settings()
    assert not plain.limits.enabled
    copied = plain.model_copy(update={"limits_file": path})  # a copy with a file reads it, not the first's
    assert copied.limits.enabled and copied.limits.models["openai:x"].in_flight == 2


async def _heard(heard: list[str], payload: str) -> bool:
    return payload in heard
