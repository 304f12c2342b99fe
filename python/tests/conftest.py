"""Engine seeds: tests marked ``seeded_engine`` run once per scheduling seed of the in-process engine.

The engine's seeded scheduling (``agent_framework_mongodb.testing.Scheduling``) gives every
operation a heavy-tailed latency before and after the server runs it, so operations in flight
together finish in server-like orders. A test about interleavings or faults is marked (usually
with ``pytestmark`` for its module) and asks for the ``engine_scheduling`` fixture, directly or
through the ``client`` fixture; it then runs under each seed of ``ENGINE_SEEDS``. Without the
marker ``engine_scheduling`` is None and the engine runs operations first in, first out.

``ENGINE_SEEDS`` is either a count (``ENGINE_SEEDS=300`` runs seeds 0 to 299) or a
comma-separated list of seeds (``ENGINE_SEEDS=17,42`` reproduces those two); the default is the
first ``DEFAULT_SEED_COUNT`` seeds, which CI runs.

Wire-protocol servers: ``wire_server`` is a started ``WireProtocolServer`` (a one-member replica set
on 127.0.0.1) over a fresh memory-only engine, for a real ``pymongo.AsyncMongoClient(wire_server.uri)``;
``make_wire_server`` starts more, over a file-backed engine (``path=``), with seeded scheduling
(``scheduling=Scheduling(seed=...)``), over a given engine, or as a set of several ``members``.
"""

from __future__ import annotations

import gc
import os
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from agent_framework_mongodb.testing import InMemoryMongoClient, Scheduling, WireProtocolServer

DEFAULT_SEED_COUNT = 3
SEEDED_MARKER = "seeded_engine"


def engine_seeds() -> list[int]:
    """The seeds ``ENGINE_SEEDS`` names, or the default ones."""
    given = os.environ.get("ENGINE_SEEDS", "").strip()
    if not given:
        return list(range(DEFAULT_SEED_COUNT))
    if "," not in given:
        return list(range(int(given)))
    return [int(seed) for seed in given.split(",") if seed.strip()]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{SEEDED_MARKER}: run once per in-process engine scheduling seed (ENGINE_SEEDS, tests/conftest.py)",
    )


_REAL_CLIENT_FOLDERS = tuple(
    Path(__file__).parent / folder
    for folder in (
        "integration_persistence",
        "e2e",
        "unit/driver",
        "unit/testing/wire",
        "unit/cli",
        "unit/test_connect_failures.py",
    )
)
"""Where tests make real ``AsyncMongoClient`` connections (to the wire front, or to dead addresses)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # pymongo drops a connection it gave up on (a timeout, a monitor's check) without closing its
    # socket, and the garbage collector warns about it wherever it runs next: inside pymongo in the
    # same test, or in any later one. These tests ignore that warning, and collect before they end.
    for item in items:
        if any(item.path.is_relative_to(folder) for folder in _REAL_CLIENT_FOLDERS):
            item.add_marker(pytest.mark.filterwarnings("ignore::ResourceWarning"))
            item.add_marker(pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"))
            item.add_marker(pytest.mark.usefixtures("collect_abandoned_sockets"))


@pytest.fixture
def collect_abandoned_sockets() -> Iterator[None]:
    """Collect garbage after a test that used real clients, ignoring unclosed-socket warnings, so
    that no socket it abandoned is left to warn (as an unraisable-exception error) in a later test."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker(SEEDED_MARKER) is None:
        return
    if "engine_scheduling" not in metafunc.fixturenames:
        return
    metafunc.parametrize("engine_scheduling", engine_seeds(), indirect=True, ids=lambda seed: f"seed{seed}")


@pytest.fixture
def engine_scheduling(request: pytest.FixtureRequest) -> Scheduling | None:
    """The scheduling an engine client of this test uses: a seed's under ``seeded_engine``, else None."""
    seed: int | None = getattr(request, "param", None)
    return None if seed is None else Scheduling(seed=seed)


WireServerFactory = Callable[..., Awaitable[WireProtocolServer]]
"""``make_wire_server(engine=None, *, path=None, scheduling=None, members=1)``: a started server."""


@pytest.fixture
async def make_wire_server() -> AsyncIterator[WireServerFactory]:
    """Starts wire-protocol servers over fresh engines: memory-only, file-backed (``path``), or with
    ``Scheduling(seed=...)``; each server is stopped, and each engine made here closed, afterwards."""
    servers: list[WireProtocolServer] = []
    engines: list[InMemoryMongoClient] = []

    async def make(
        engine: InMemoryMongoClient | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
        scheduling: Scheduling | None = None,
        members: int = 1,
    ) -> WireProtocolServer:
        if engine is None:
            engine = InMemoryMongoClient(path=path, scheduling=scheduling)
            engines.append(engine)
        server = WireProtocolServer(engine, members=members)
        await server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.stop()
        if server.engine not in engines:
            engines.append(server.engine)  # a lossy failover's new engine
    for engine in engines:
        if not engine.closed:
            await engine.close()


@pytest.fixture
async def wire_server(make_wire_server: WireServerFactory) -> WireProtocolServer:
    """A started wire-protocol server (a one-member replica set) over a fresh memory-only engine."""
    return await make_wire_server()
