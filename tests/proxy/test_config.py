"""``load_config``: the TOML file, the flags over it, and every setting refused before start."""

from __future__ import annotations

from pathlib import Path

import pytest

from otelsse.proxy import ConfigError, ProxyApp, ProxyConfig, Upstream, load_config
from otelsse.proxy._config import parse_upstream
from otelsse.routes import Request, get_route, match_route, unregister_host

UPSTREAM = '[upstreams.openai]\nurl = "https://api.openai.com/"\n'


def from_file(tmp_path: Path, text: str, **flags: object) -> object:
    path = tmp_path / "proxy.toml"
    path.write_text(text)
    return load_config(str(path), flags)


def test_the_file_then_the_flags(tmp_path: Path) -> None:
    text = 'listen = "0.0.0.0:9000"\nmetrics_listen = "[::1]:9464"\nidle_timeout = 5\n' + UPSTREAM
    config = from_file(tmp_path, text, upstreams=[parse_upstream("fake=http://127.0.0.1:8000")])
    assert config.listen == ("0.0.0.0", 9000)  # type: ignore[attr-defined]
    assert config.metrics_listen == ("::1", 9464)  # type: ignore[attr-defined]
    assert config.idle_timeout == 5.0  # type: ignore[attr-defined]
    assert [u.name for u in config.upstreams] == ["openai", "fake"]  # type: ignore[attr-defined]
    flags = from_file(tmp_path, text, listen="127.0.0.1:1", metrics_listen="off")
    assert flags.listen == ("127.0.0.1", 1)  # type: ignore[attr-defined]
    assert flags.metrics_listen is None  # type: ignore[attr-defined]


def test_a_base_url_keeps_its_path_without_the_trailing_slash() -> None:
    assert str(Upstream("a", "https://example.com/openai/").base) == "https://example.com/openai"
    assert str(Upstream("a", "https://example.com/").base) == "https://example.com"
    assert str(Upstream("a", "https://example.com").base) == "https://example.com"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("nonsense = 1\n" + UPSTREAM, "unknown setting 'nonsense'"),
        ("max_streams = 1.5\n" + UPSTREAM, "max_streams must be a whole number"),
        ("max_streams = 0\n" + UPSTREAM, "max_streams must be at least 1"),
        ('idle_timeout = "soon"\n' + UPSTREAM, "idle_timeout must be a number of seconds"),
        ("idle_timeout = true\n" + UPSTREAM, "idle_timeout must be a number of seconds"),
        ("connect_timeout = 0\n" + UPSTREAM, "connect_timeout must be more than 0"),
        ("drain_timeout = -1\n" + UPSTREAM, "drain_timeout must be 0 seconds or more"),
        ('reuse_port = "yes"\n' + UPSTREAM, "reuse_port must be true or false"),
        ('listen = "a:1"\nmetrics_listen = "a:1"\n' + UPSTREAM, "must differ from listen"),
        ('upstreams = "openai"\n', "upstreams must be a table"),
        ("[upstreams.openai]\n", "needs url"),
        (UPSTREAM + 'path = "/v1"\n', "unknown setting 'path'"),
        (UPSTREAM + 'host_profile = "nope"\n', "no route or profile 'nope'"),
        (UPSTREAM + 'host_profile = "openai.chat_completions"\n', "a route, not a host profile"),
        ("[upstreams.Bad]\nurl = 'http://x'\n", "upstream name 'Bad'"),
        ("not toml =\n", "not TOML"),
    ],
)
def test_a_setting_the_proxy_cannot_start_with(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace("(", r"\(")):
        from_file(tmp_path, text)


def test_a_host_profile_reads_that_upstreams_streams() -> None:
    upstream = Upstream("gw", "http://gateway.internal:4000", "openai.chat_completions:no_done")
    request = Request("POST", "gateway.internal", "/v1/chat/completions", "")
    assert match_route(request) is get_route("openai.chat_completions")
    ProxyApp(ProxyConfig(upstreams=(upstream,)))
    try:
        assert match_route(request) is get_route("openai.chat_completions:no_done")
    finally:
        unregister_host("gateway.internal")
