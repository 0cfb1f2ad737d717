"""``load_config``: the TOML file, the flags over it, and every setting refused before start."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import otelsse.proxy
from otelsse import STRICT_DEFAULT
from otelsse._cli import _parse, main
from otelsse._monitor import Outcome
from otelsse.proxy import ConfigError, ProxyApp, ProxyConfig, Upstream, load_config
from otelsse.proxy._config import load_exports, parse_upstream
from otelsse.proxy._server import start_line
from otelsse.routes import Request, get_route, match_route, unregister_host
from tests.test_deploy import proxy_config

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
        ("max_streams = 1.5\n" + UPSTREAM, "max_streams must be a whole number, at least 1"),
        ("max_streams = 0\n" + UPSTREAM, "max_streams must be a whole number, at least 1, not 0"),
        ('idle_timeout = "soon"\n' + UPSTREAM, "idle_timeout must be a number of seconds"),
        ("idle_timeout = true\n" + UPSTREAM, "idle_timeout must be a number of seconds"),
        ("connect_timeout = 0\n" + UPSTREAM, "connect_timeout must be a number of seconds, more"),
        ("drain_timeout = -1\n" + UPSTREAM, "drain_timeout must be a number of seconds, at least"),
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


# -- every numeric setting, from a flag or from the file --------------------------------------

#: Found in the dataclass, not in the table that checks them: a numeric setting added without
#: its check is caught here.
NUMERIC = [f.name for f in dataclasses.fields(ProxyConfig) if f.type in ("int", "float")]
#: What no setting takes: NaN (which compares false with every bound), the infinities, and a
#: negative, spelt the same by a flag and by TOML.
BAD = ["nan", "inf", "-inf", "-1"]


def _start(argv: list[str]) -> int:
    try:
        return main(["proxy", "--listen", "127.0.0.1:0", *argv])
    except SystemExit as exc:  # argparse's own refusal: usage, then the error
        return int(exc.code or 0)


@pytest.fixture
def never_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    def serve(config: ProxyConfig) -> int:
        raise AssertionError(f"the proxy would have started with {config}")

    monkeypatch.setattr(otelsse.proxy, "serve", serve)


def test_every_numeric_setting_is_checked() -> None:
    assert set(NUMERIC) == set(otelsse.proxy._config.NUMBERS)


@pytest.mark.usefixtures("never_serve")
@pytest.mark.parametrize("given", ["flag", "file"])
@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize("setting", NUMERIC)
def test_a_numeric_setting_refuses_nan_infinities_and_negatives(
    setting: str, value: str, given: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if given == "flag":
        argv = ["--upstream", "a=http://127.0.0.1:9", f"--{setting.replace('_', '-')}={value}"]
    else:
        path = tmp_path / "proxy.toml"
        path.write_text(f'{setting} = {value}\n[upstreams.a]\nurl = "http://127.0.0.1:9"\n')
        argv = ["--config", str(path)]
    assert _start(argv) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"otelsse proxy: error: {setting} must be "), error
    assert error.endswith(f", not {value!r}\n" if given == "flag" else f", not {value}\n")
    assert error.count("\n") == 1


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), -1])
@pytest.mark.parametrize("setting", NUMERIC)
def test_a_config_built_in_code_is_checked_the_same(setting: str, value: float) -> None:
    with pytest.raises(ConfigError, match=f"^{setting} must be "):
        ProxyConfig(upstreams=(Upstream("a", "http://127.0.0.1:9"),), **{setting: value})


def test_the_numbers_a_flag_or_the_file_give_are_taken(tmp_path: Path) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text(
        'header_timeout = 2\nmax_header_bytes = 1000\n[upstreams.a]\nurl = "http://x"\n'
    )
    config = load_config(str(path), {"body_timeout": "0.5", "drain_timeout": "0"})
    assert (config.header_timeout, config.max_header_bytes) == (2.0, 1000)
    assert (config.body_timeout, config.drain_timeout) == (0.5, 0.0)


# -- where telemetry goes, and the start line that says so ---------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operators" / "proxy.md"


@pytest.mark.parametrize(
    ("environ", "traces", "metrics"),
    [
        ({}, "none (set OTEL_EXPORTER_OTLP_ENDPOINT, or OTEL_TRACES_EXPORTER=console)", None),
        ({"OTEL_TRACES_EXPORTER": "console,otlp"}, "console, otlp http/protobuf → "
         "http://localhost:4318/v1/traces", None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://u:p@c.example/base?k=v",
          "OTEL_METRICS_EXPORTER": "none"},
         "otlp http/protobuf → https://c.example/base/v1/traces", "none"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
          "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://m.example:4317"},
         "none (set OTEL_EXPORTER_OTLP_ENDPOINT, or OTEL_TRACES_EXPORTER=console)",
         "otlp grpc → http://m.example:4317"),
    ],
)  # fmt: skip
def test_exports_follow_the_sdks_variables(
    environ: dict[str, str], traces: str, metrics: str | None
) -> None:
    exports = load_exports(environ)
    assert str(exports.traces) == traces
    unset = "none (set OTEL_EXPORTER_OTLP_ENDPOINT, or OTEL_METRICS_EXPORTER=console)"
    assert str(exports.metrics) == (metrics or unset)


@pytest.mark.parametrize(
    "environ",
    [
        {"OTEL_TRACES_EXPORTER": "zipkin"},
        {"OTEL_METRICS_EXPORTER": "prometheus"},
        {"OTEL_TRACES_EXPORTER": "none,console"},
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_TRACES_EXPORTER": "otlp"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4317"},
    ],
)
def test_exports_it_cannot_make_are_refused_naming_the_variable(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as refused:
        load_exports(environ)
    assert str(refused.value).startswith(tuple(environ)), refused.value


@pytest.mark.parametrize(
    ("argv", "environ"),
    [
        (["--upstream", "fake=http://127.0.0.1:8000"], {"OTEL_TRACES_EXPORTER": "console"}),
        (
            ["--upstream", "openai=https://api.openai.com", "--listen", "0.0.0.0:8787",
             "--metrics-listen", "0.0.0.0:9464"],
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector:4317",
             "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
        ),
    ],
)  # fmt: skip
def test_the_start_lines_the_docs_quote_are_the_proxys(
    argv: list[str], environ: dict[str, str]
) -> None:
    config = proxy_config(["otelsse", "proxy", *argv], Path)
    line = "otelsse proxy: " + start_line(config, config.listen, load_exports(environ))
    assert f"```text\n{line}\n```" in DOCS.read_text(encoding="utf-8")


# -- strict mode: proxy-wide (--strict, the file's strict) and per upstream --------------------


def _names(outcomes: frozenset[Outcome]) -> set[str]:
    return {outcome.value for outcome in outcomes}


def test_strict_is_off_unless_asked(tmp_path: Path) -> None:
    config = from_file(tmp_path, UPSTREAM)
    assert isinstance(config, ProxyConfig)
    assert config.strict == frozenset()
    assert config.strict_for(config.upstreams[0]) == frozenset()


@pytest.mark.parametrize(
    ("value", "outcomes"),
    [
        ("true", STRICT_DEFAULT),
        ('"default,terminal_missing"', STRICT_DEFAULT | {"terminal_missing"}),
        ('["truncated", "incomplete"]', {"truncated", "incomplete"}),
        ("false", set()),
        ("[]", set()),
    ],
)
def test_strict_from_the_file_for_every_upstream_and_per_upstream(
    tmp_path: Path, value: str, outcomes: set[str]
) -> None:
    text = f"strict = {value}\n{UPSTREAM}[upstreams.own]\nurl = 'http://127.0.0.1:1'\n"
    config = from_file(tmp_path, text + "strict = ['provider_error']\n")
    assert isinstance(config, ProxyConfig)
    openai, own = config.upstreams
    assert _names(config.strict_for(openai)) == outcomes
    assert _names(config.strict_for(own)) == {"provider_error"}  # an upstream's own wins
    off = from_file(tmp_path, text + "strict = false\n")
    assert isinstance(off, ProxyConfig)
    assert off.strict_for(off.upstreams[1]) == frozenset()


def test_the_strict_flag_sets_what_upstreams_without_their_own_get(tmp_path: Path) -> None:
    text = (
        f"strict = false\n{UPSTREAM}[upstreams.own]\nurl = 'http://127.0.0.1:1'\nstrict = false\n"
    )
    config = from_file(tmp_path, text, strict="true")
    assert isinstance(config, ProxyConfig)
    openai, own = config.upstreams
    assert _names(config.strict_for(openai)) == STRICT_DEFAULT
    assert config.strict_for(own) == frozenset()
    # as the command line gives it: --strict alone, or with outcomes
    upstream = ["--upstream", "a=http://127.0.0.1:1"]
    assert _parse(["proxy", *upstream, "--strict"]).strict == "true"
    given = _parse(["proxy", "--strict=default,terminal_missing", *upstream]).strict
    flagged = load_config(None, {"strict": given, "upstreams": [parse_upstream(upstream[1])]})
    assert _names(flagged.strict) == STRICT_DEFAULT | {"terminal_missing"}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("strict = 1\n" + UPSTREAM, "strict must be true, false or outcome names, not 1"),
        ('strict = "complete"\n' + UPSTREAM, "strict: strict mode cannot refuse 'complete'"),
        (UPSTREAM + "strict = ['cancelled']", "upstreams.openai.strict: strict mode cannot"),
        (UPSTREAM + "strict = [1]", "upstreams.openai.strict must be true, false or outcome"),
    ],
)
def test_a_strict_setting_it_cannot_take(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        from_file(tmp_path, text)


def test_the_start_line_says_which_upstreams_are_strict() -> None:
    config = ProxyConfig(
        upstreams=(
            Upstream("a", "http://127.0.0.1:1"),
            Upstream("b", "http://127.0.0.1:2", strict=frozenset()),
            Upstream("c", "http://127.0.0.1:3", strict=frozenset({Outcome.TERMINAL_MISSING})),
        ),
        strict=frozenset(Outcome(name) for name in STRICT_DEFAULT),
    )
    line = start_line(config, config.listen, load_exports({}))
    assert (
        "upstreams: a → http://127.0.0.1:1 (strict), b → http://127.0.0.1:2, "
        "c → http://127.0.0.1:3 (strict: terminal_missing);"
    ) in line


def test_the_files_the_docs_show_are_taken(tmp_path: Path) -> None:
    text = DOCS.read_text(encoding="utf-8")
    blocks = text.split("```toml\n")[1:]
    assert len(blocks) == 2
    strict, settings = (from_file(tmp_path, block.partition("```")[0]) for block in blocks)
    assert isinstance(strict, ProxyConfig)
    assert _names(strict.strict) == STRICT_DEFAULT
    assert _names(strict.strict_for(strict.upstreams[0])) == {"truncated", "terminal_missing"}
    assert isinstance(settings, ProxyConfig)
    assert settings.strict == frozenset()
    openai, gateway = settings.upstreams
    assert _names(settings.strict_for(openai)) == STRICT_DEFAULT
    assert settings.strict_for(gateway) == frozenset()
