"""Render the telemetry reference (docs/reference.md) from the module that owns the names.

    python docs/generate_reference.py           # print it
    python docs/generate_reference.py --write   # write docs/reference.md

Names, types, units, descriptions, buckets and caps come from ``otelsse.semconv``; the closed
value sets from ``otelsse.monitor.Outcome`` and the built-in routes' declarations (all sans-IO,
so this runs without OpenTelemetry). tests/sre/test_docs.py checks that the committed file
equals this output and that the Prometheus names below equal the ones the dashboard tests check
queries against.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from otelsse import semconv
from otelsse.monitor import Outcome
from otelsse.routes import AUTO, BUILT_IN, BUILT_IN_PROFILES
from otelsse.semconv import prometheus_label, prometheus_series

OUTPUT = Path(__file__).with_name("reference.md")

#: Span attributes set by the instrumentation around the HTTP exchange; every other one comes
#: from the stream's report (``otelsse.telemetry.span_attributes``), which ``otelsse inspect
#: --json`` prints too.
INSTRUMENTATION_ONLY = (
    semconv.HTTP_RESPONSE_STATUS_CODE,
    semconv.SERVER_ADDRESS,
    semconv.SERVER_PORT,
    semconv.REQUEST_ID,
)

_KINDS = {
    "counter": ("Counter", "counter"),
    "up_down_counter": ("UpDownCounter", "gauge"),
    "histogram": ("Histogram", "histogram"),
}


def _code(values: Iterable[object]) -> str:
    return ", ".join(f"`{value}`" for value in values)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}"]
    lines.extend(f"| {' | '.join(row)} |" for row in rows)
    return lines


def _span() -> list[str]:
    return [
        "## The span",
        "",
        *_table(
            ("", ""),
            (
                ("span name", f"`{semconv.SPAN_NAME}`"),
                ("span kind", semconv.SPAN_KIND),
                ("instrumentation scope (tracer and meter)", f"`{semconv.SCOPE_NAME}`"),
                ("schema URL", f"`{semconv.SCHEMA_URL}`"),
            ),
        ),
        "",
        "One span per streamed response, from request send until the stream really ends (EOF, "
        "close, read error, cancellation or garbage collection), parent of the HTTP client span "
        "when the request was expected to stream. Its status is ERROR exactly for the outcomes "
        f"in `ERROR_OUTCOMES` ({_code(sorted(semconv.ERROR_OUTCOMES))}), with the outcome as "
        "`error.type` and as the status description; see [outcomes.md](outcomes.md).",
        "",
    ]


def _attributes() -> list[str]:
    labels = {key for spec in semconv.METRICS for key in spec.attributes}
    rows = []
    for key, spec in semconv.ATTRIBUTE_SPECS.items():
        on = [
            where
            for where, has in (("span", key in semconv.ATTRIBUTES), ("metrics", key in labels))
            if has
        ]
        label = f"`{prometheus_label(key)}`" if key in labels else "—"
        rows.append(
            (
                f"`{key}`",
                spec.type,
                f"`{spec.unit}`" if spec.unit else "—",
                ", ".join(on),
                label,
                spec.description,
            )
        )
    return [
        "## Attributes",
        "",
        f"Set by the instrumentation only: {_code(INSTRUMENTATION_ONLY)}. Every other span "
        "attribute comes from the stream's `StreamReport` (`otelsse.telemetry.span_attributes`), "
        "which `otelsse inspect --json` prints as well. No content is ever recorded: no prompt, "
        "generated text, tool arguments, event data, provider error message or header value "
        "other than the request id.",
        "",
        *_table(("attribute", "type", "unit", "on", "Prometheus label", "description"), rows),
        "",
    ]


def _most_series(spec: semconv.MetricSpec) -> str:
    """The worst case with the built-in routes, and what one registered route adds."""
    built_in, more = (
        semconv.max_series(spec, routes=routes, outcomes=len(Outcome))
        for routes in (len(BUILT_IN), len(BUILT_IN) + 1)
    )
    return f"{built_in} (+{more - built_in})"


def _metrics() -> list[str]:
    rows = []
    for spec in semconv.METRICS:
        kind, prometheus_type = _KINDS[spec.kind]
        labels = [f"`{prometheus_label(key)}`" for key in spec.attributes]
        if spec.kind == "histogram":
            labels.append("`le` (`_bucket` only)")
        buckets = ", ".join(_number(b) for b in spec.buckets) if spec.buckets else "—"
        rows.append(
            (
                f"`{spec.name}`",
                f"{kind} ({prometheus_type})",
                f"`{spec.unit}`",
                "<br>".join(f"`{series}`" for series in prometheus_series(spec)),
                ", ".join(labels),
                spec.description,
                buckets,
                _most_series(spec),
            )
        )
    header = ("metric", "kind (Prometheus type)", "unit", "Prometheus series", "labels")
    return [
        "## Metrics",
        "",
        "Prometheus names are those of the OpenTelemetry Prometheus exporter and of the "
        "Collector's default translation (`UnderscoreEscapingWithSuffixes`). Every series also "
        "carries `job` and `instance` from the scrape and, from exporter 0.64b0, "
        "`otel_scope_name`, `otel_scope_version` and `otel_scope_schema_url`: never depend on "
        "those, aggregate with `sum by (...)`, and take `sum(rate(...))`, never `rate(sum(...))`.",
        "",
        *_table((*header, "description", "bucket boundaries", "most series (+ per route)"), rows),
        "",
        "*Most series*: the most attribute sets the instrument can hold whatever the traffic, "
        f"with the {len(BUILT_IN)} built-in routes, and what each route registered with "
        "`register_route()` adds (see the caps below).",
        "",
        "Series that exist before their first event, so that `increase()` sees the first one, "
        f"created the first time one of the first {semconv.MAX_SERIES_KEYS} series keys (route, "
        "server.address, provider, model) is seen:",
        "",
        f"- `{semconv.STREAMS.name}`: every outcome at 0, without a stop reason (failed streams "
        "carry none either).",
        f"- `{semconv.TOOL_CALLS.name}`: `{semconv.TOOL_CALL_KIND}` `{semconv.TOOL_CALL_CLIENT}` "
        f"with `{semconv.TOOL_CALL_VALID}` true and false at 0 (server-run calls appear with "
        "the first one).",
        f"- `{semconv.STREAM_REFUSALS.name}`: 0.",
        f"- `{semconv.INSTRUMENTATION_ERRORS.name}`: every stage at 0 when otelsse is "
        "instrumented.",
        "",
    ]


def _closed_sets() -> list[str]:
    outcomes = [
        (f"`{o.value}`", "ERROR" if o.value in semconv.ERROR_OUTCOMES else "unset") for o in Outcome
    ]
    stages = [
        (f"`{stage}`", semconv.INSTRUMENTATION_STAGE_DESCRIPTIONS[stage])
        for stage in semconv.INSTRUMENTATION_STAGES
    ]
    routes = [
        (
            f"`{route.name}`",
            f"`{route.provider}`" if route.provider else "— (absent)",
            f"`{' '.join(route.example_request)}`" if route.example_request else "any SSE",
            _code(sorted(route.success_stops)) if route.has_terminal else "none: `eof_unverified`",
        )
        for route in BUILT_IN
    ]
    profiles = [
        (
            f"`{profile.profile}`",
            f"`{profile.full_name()}`",
            _code(profile.hosts),
            " ".join((profile.__doc__ or "").split()).replace("``", "`"),
        )
        for profile in BUILT_IN_PROFILES
    ]
    return [
        "## Label values",
        "",
        f"### `{semconv.OUTCOME}` (closed)",
        "",
        "What each means, and what to do about it: [outcomes.md](outcomes.md).",
        "",
        *_table(("value", "span status"), outcomes),
        "",
        f"### `{semconv.INSTRUMENTATION_STAGE}` (closed)",
        "",
        *_table(("value", "a contained failure while"), stages),
        "",
        f"### `{semconv.TOOL_CALL_KIND}` (closed)",
        "",
        f"{_code(semconv.TOOL_CALL_KINDS)}.",
        "",
        f"### `{semconv.TOOL_CALL_VALID}` (closed)",
        "",
        "`true` or `false` (a boolean attribute; the Prometheus label value is the string); "
        f"absent on `{semconv.TOOL_CALL_SERVER}` calls.",
        "",
        f"### `{semconv.ROUTE}` and `{semconv.GEN_AI_PROVIDER_NAME}`",
        "",
        "The built-in routes, as each route module declares them: its provider, a request it "
        "recognises, and the stop reasons that count as success. Routes registered with "
        f"`register_route()` "
        f"add their own names. `{AUTO}` asks for the contract to be sniffed from the first "
        "events and is replaced by the route found (except on "
        f"`{semconv.STREAMS_ACTIVE.name}`, see `{semconv.ROUTE}` above).",
        "",
        *_table(("route", "provider", "e.g. request", "success stops"), routes),
        "",
        f"### `{semconv.ROUTE_PROFILE}`",
        "",
        "The built-in host profiles: variants of a route's contract for the servers that bend it "
        "on purpose, chosen by the request's host (`.example.com` covers its subdomains). "
        "`register_host()` and `instrument(host_profiles=...)` add hosts, and a `Route` "
        "subclass that sets `profile` adds a profile. What each OpenAI-compatible service "
        "sends at the end of a stream, with sources: [gateways.md](gateways.md).",
        "",
        *_table(("profile", "route name", "built-in hosts", "what it allows"), profiles),
        "",
    ]


def _caps() -> list[str]:
    s = semconv
    other = f"`{s.OVERFLOW_VALUE}`"
    return [
        "## Cardinality and size caps",
        "",
        f"The OpenTelemetry SDK keeps at most {s.SDK_CARDINALITY_LIMIT} attribute sets per "
        "instrument by default; later points go to one series labelled "
        '`otel_metric_overflow="true"` that carries no other attribute, not even the outcome. '
        f"otelsse folds its own overflow into {other} long before that, always keeping the "
        "route, the provider and the outcome:",
        "",
        f"- `{s.GEN_AI_RESPONSE_MODEL}`: the first {s.DEFAULT_MAX_MODEL_NAMES} distinct values "
        f"pass, later ones become {other} (`instrument(max_model_names=...)`).",
        f"- `{s.SERVER_ADDRESS}`: the first {s.DEFAULT_MAX_SERVER_ADDRESSES} distinct values "
        f"pass, later ones become {other}.",
        f"- `{s.STOP_REASON}`: the first {s.DEFAULT_MAX_STOP_REASONS} distinct values pass, "
        f"later ones become {other}.",
        f"- Models and stop reasons are cut to {s.MAX_METRIC_VALUE_CHARS} characters before "
        "they are counted.",
        f"- Series keys (route, server.address, provider, model): the first "
        f"{s.MAX_SERIES_KEYS} distinct ones get series of their own, with their outcomes "
        f"pre-created at 0. A later key is counted under its route's overflow key: "
        f"`{s.SERVER_ADDRESS}` and `{s.GEN_AI_RESPONSE_MODEL}` {other}. On "
        f"`{s.STREAMS_ACTIVE.name}` the key is (route, server.address), capped the same way.",
        f"- Stop reasons on `{s.STREAMS.name}` and the histograms: the first "
        f"{s.MAX_STOP_REASON_SERIES} distinct (series key, outcome, stop reason) sets keep "
        "their values; a later one is counted under its route's overflow key with stop reason "
        f"{other}.",
        "",
        "The key and stop-reason limits are what bound every instrument (the *most series* "
        "column above), whatever the per-attribute caps are set to: with the built-in routes "
        "each instrument stays under half the SDK's limit, and it takes dozens of registered "
        "routes to approach it. Traffic never adds a route: only `register_route()` does.",
        "",
        "On the span, provider-sent values are cut: stop reasons, finish reasons and error "
        f"codes to {s.MAX_CODE_CHARS} characters, the model and the response id to "
        f"{s.MAX_IDENTIFIER_CHARS}; `{s.GEN_AI_RESPONSE_FINISH_REASONS}` keeps at most "
        f"{s.MAX_FINISH_REASONS} entries; `{s.REQUEST_ID}` keeps at most "
        f"{s.MAX_REQUEST_ID_CHARS} characters, printable ones only.",
        "",
    ]


def render() -> str:
    lines = [
        "# otelsse telemetry reference",
        "",
        "<!-- Generated by docs/generate_reference.py from otelsse/semconv.py: do not edit. "
        "Regenerate with `python docs/generate_reference.py --write`. -->",
        "",
        "Every name below is defined in `otelsse/semconv.py`, which the code, the dashboards "
        "and the alerts read.",
        "",
        *_span(),
        *_attributes(),
        *_metrics(),
        *_closed_sets(),
        *_caps(),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUTPUT}")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        OUTPUT.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
