"""The HTTP protocol of ``spladekit serve`` (spladekit.serve.connection) against the uvicorn it subclasses.

``NoDelayHTTPProtocol`` overrides methods of uvicorn's ``HttpToolsProtocol`` and reads its state, so it
is bound to the uvicorn versions it was tested on (``pyproject.toml``'s ``serve`` extra). These tests
fail when the installed uvicorn is outside that range, or when the source of any method the protocol
builds on differs from the one it was tested with (the SHA-256 of their sources, recorded per
version below): then read ``spladekit/serve/connection.py`` against the new uvicorn, run the serve
tests, and record the new version's digest and widen the range.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import pickle
import re
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("httptools")

import uvicorn  # noqa: E402
from packaging.requirements import Requirement  # noqa: E402
from uvicorn.protocols.http.auto import AutoHTTPProtocol  # noqa: E402
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # noqa: E402
from uvicorn.server import ServerState  # noqa: E402

from spladekit.serve.connection import HEAD_TIMEOUT_S, NoDelayHTTPProtocol, server_config  # noqa: E402

BUILT_ON = [
    "__init__",
    "connection_made",
    "connection_lost",
    "data_received",
    "on_message_begin",
    "on_url",
    "on_header",
    "on_headers_complete",
    "on_message_complete",
    "on_response_complete",
]
"""The methods of ``HttpToolsProtocol`` the protocol overrides, or whose state (``url``, ``headers``,
``cycle``, ``pipeline``, ``scope``, ``config``) it reads."""

TESTED = {"0.55.0": "95ebbe94a7fe59e06f4d94178a8efebb5b7bb37335511da460b6f0588fcafac0"}
"""SHA-256 of the sources of :data:`BUILT_ON`, concatenated, per uvicorn version the protocol was tested on."""


def _serve_requirement() -> Requirement:
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    serve = re.search(r"^serve = \[(.*)\]", text, re.M).group(1)
    return Requirement(next(item for item in re.findall(r'"([^"]+)"', serve) if item.startswith("uvicorn")))


def test_the_installed_uvicorn_is_one_the_protocol_was_tested_on():
    requirement = _serve_requirement()
    assert requirement.specifier.contains(uvicorn.__version__), (
        f"uvicorn {uvicorn.__version__} is outside {requirement}"
    )
    assert all(requirement.specifier.contains(version) for version in TESTED), f"{sorted(TESTED)} vs {requirement}"
    assert uvicorn.__version__ in TESTED, f"uvicorn {uvicorn.__version__}: no record that the protocol was tested on it"


def test_the_uvicorn_methods_the_protocol_builds_on_are_unchanged():
    assert issubclass(AutoHTTPProtocol, HttpToolsProtocol)  # the parser whose callbacks bound a head
    source = "".join(inspect.getsource(getattr(HttpToolsProtocol, name)) for name in BUILT_ON)
    digest = hashlib.sha256(source.encode()).hexdigest()
    assert digest == TESTED.get(uvicorn.__version__), (
        f"uvicorn {uvicorn.__version__}'s HttpToolsProtocol differs from the one NoDelayHTTPProtocol was tested on "
        f"({', '.join(BUILT_ON)}); review spladekit/serve/connection.py, then record {digest}"
    )


async def asgi_app(scope, receive, send):
    """An ASGI application the configurations below name (never called)."""


def test_the_head_timeout_reaches_the_protocol_through_its_configuration():
    """Two configurations in one process, two timeouts (no class attribute set per process); the
    configuration survives pickling (spawned workers get it pickled)."""
    loop = asyncio.new_event_loop()
    try:
        made = []
        for seconds in (3.5, 7.0):
            config = server_config("tests.serve.test_connection:asgi_app", head_timeout_s=seconds)
            made.append(NoDelayHTTPProtocol(config=config, server_state=ServerState(), app_state={}, _loop=loop))
        assert [p.head_timeout_s for p in made] == [3.5, 7.0]
        plain = NoDelayHTTPProtocol(
            config=uvicorn.Config("tests.serve.test_connection:asgi_app"),
            server_state=ServerState(),
            app_state={},
            _loop=loop,
        )
        assert plain.head_timeout_s == HEAD_TIMEOUT_S  # a plain uvicorn configuration: the default
        assert (
            pickle.loads(
                pickle.dumps(server_config("tests.serve.test_connection:asgi_app", head_timeout_s=3.5))
            ).head_timeout_s
            == 3.5
        )
    finally:
        loop.close()
