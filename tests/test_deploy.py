"""deploy/: the proxy's image, configuration, compose stack and Kubernetes manifests agree.

There is no Docker engine or cluster here, so the files are checked statically, each with the
parser that reads it for real: the TOML configurations with ``otelsse.proxy.load_config``, every
container's ``otelsse`` command with the CLI's own argparse parser (``otelsse._cli._parser``, so a
misspelt flag fails), YAML with PyYAML, the Dockerfile's logical lines by hand. Across the files:
the listen and metrics ports match the Dockerfile's EXPOSE, compose's ports and the pod's
container ports and probes; the probes ask /healthz and /readyz; the stop grace periods outlast
``drain_timeout``; an application's base URL names the proxy's listen port and an upstream the
proxy's configuration defines; the proxy's OTLP endpoint is a receiver its Collector defines,
and the Collector's pipelines use components it defines; compose's dependencies, Services and
mounted or built paths exist. The first tests show the helpers refuse what they must.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
import shlex
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import SplitResult, urlsplit

import pytest
import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the test extra installs tomli there
    import tomli as tomllib

from otelsse._cli import _parser
from otelsse._demo.provider import SCENARIOS
from otelsse.proxy import ConfigError, ProxyConfig, load_config
from otelsse.proxy._config import parse_upstream
from otelsse.proxy._server import FD_RESERVE
from otelsse.routes import get_route
from tests._compose import (
    Instruction,
    copied,
    dockerfile,
    dockerignore_allows,
    load_yaml,
    mounted,
    mounts,
)

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
EXAMPLES_COMPOSE = ROOT / "examples" / "compose"
#: Where the image runs its configuration from (its CMD's --config).
IMAGE_CONFIG = "/etc/otelsse/proxy.toml"


# --------------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------------


def instruction(instructions: list[Instruction], keyword: str) -> str:
    (rest,) = [i.rest for i in instructions if i.keyword == keyword]
    return rest


def proxy_config(argv: list[str], files: Callable[[str], Path]) -> ProxyConfig:
    """The configuration a container running ``argv`` (``otelsse proxy ...``) starts with, as
    ``otelsse proxy`` builds it: the real parser, then ``load_config`` with the --config file
    (``files`` maps its path in the container to a file here) and the flags as overrides."""
    assert argv[:2] == ["otelsse", "proxy"], argv
    try:
        args = _parser().parse_args(argv[1:])
    except SystemExit:
        raise AssertionError(f"otelsse's parser refuses {shlex.join(argv)}") from None
    overrides: dict[str, Any] = {
        key: value
        for key, value in vars(args).items()
        if key not in {"command", "config", "upstream"}
    }
    overrides["upstreams"] = [parse_upstream(text) for text in args.upstream or ()]
    path = None if args.config is None else str(files(args.config))
    return load_config(path, overrides)


def demo_args(argv: list[str]) -> Any:
    assert argv[:2] == ["otelsse", "demo"], argv
    try:
        return _parser().parse_args(argv[1:])
    except SystemExit:
        raise AssertionError(f"otelsse's parser refuses {shlex.join(argv)}") from None


def endpoint_port(endpoint: str) -> int:
    """The port of a ``HOST:PORT`` endpoint or a URL."""
    return int(endpoint.rstrip("/").rsplit(":", 1)[1])


def url(text: str) -> SplitResult:
    parts = urlsplit(text)
    assert parts.scheme == "http", text
    assert parts.hostname, text
    assert parts.port, text
    return parts


def first_segment(parts: SplitResult) -> str:
    return parts.path.lstrip("/").split("/")[0]


def seconds(duration: str) -> float:
    """A compose duration (``45s``, ``1m30s``) in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    pieces = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert "".join(n + u for n, u in pieces) == duration, duration
    return sum(float(number) * units[unit] for number, unit in pieces)


def check_pipelines(collector: dict[str, Any]) -> None:
    """Every component a pipeline (or the service) names is defined; both signals come in over
    the otlp receiver (the proxy sends spans and metrics)."""
    service = collector["service"]
    for extension in service.get("extensions", ()):
        assert extension in collector.get("extensions", {}), f"extension {extension} undefined"
    pipelines = service["pipelines"]
    assert {"traces", "metrics"} <= set(pipelines)
    for name, pipeline in pipelines.items():
        assert pipeline.get("receivers"), name
        assert pipeline.get("exporters"), name
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, ()):
                assert component in collector.get(kind, {}), f"{name}: {kind} {component} undefined"
    for signal in ("traces", "metrics"):
        assert "otlp" in pipelines[signal]["receivers"], signal


def otlp_receiver_port(collector: dict[str, Any], protocol: str) -> int:
    """Where the Collector's otlp receiver listens for ``protocol`` (the SDK's names)."""
    kind = {"grpc": "grpc", "http/protobuf": "http"}[protocol]
    return endpoint_port(collector["receivers"]["otlp"]["protocols"][kind]["endpoint"])


def otlp_target(environment: Mapping[str, str]) -> tuple[SplitResult, str]:
    """The OTLP endpoint a proxy is given and its protocol (the proxy's default: http)."""
    endpoint = url(environment["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert endpoint.path in ("", "/"), "the SDK adds /v1/traces and /v1/metrics itself"
    protocol = environment.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    return endpoint, protocol


def check_base_urls(
    environment: Mapping[str, Any], proxy_host: str, config: ProxyConfig
) -> list[SplitResult]:
    """The application's URLs that go to the proxy: at least one; each on its listen port and
    naming an upstream the configuration defines."""
    found = [
        url(value)
        for value in environment.values()
        if isinstance(value, str) and value.startswith("http://")
    ]
    to_proxy = [parts for parts in found if parts.hostname == proxy_host]
    assert to_proxy, f"no base URL of the application goes to {proxy_host}: {environment}"
    names = {upstream.name for upstream in config.upstreams}
    for parts in to_proxy:
        assert parts.port == config.listen[1], parts.geturl()
        assert first_segment(parts) in names, f"{parts.geturl()}: upstreams are {sorted(names)}"
    return to_proxy


# --------------------------------------------------------------------------------------------
# The helpers have teeth
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["otelsse", "proxy", "--listn", "0.0.0.0:8787"],  # a misspelt flag
        ["otelsse", "proxy", "--max-streams", "0"],  # a value the setting refuses
        ["otelsse", "prox", "--listen", "0.0.0.0:8787"],  # not the proxy at all
    ],
)
def test_a_wrong_command_fails_the_check(argv: list[str]) -> None:
    with pytest.raises((AssertionError, ConfigError)):
        proxy_config(argv, lambda path: DEPLOY / "proxy.toml")


def test_a_wrong_configuration_fails_the_check(tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text((DEPLOY / "proxy.toml").read_text() + 'listen_port = "8787"\n')
    argv = ["otelsse", "proxy", "--config", IMAGE_CONFIG]
    with pytest.raises(ConfigError, match="listen_port"):
        proxy_config(argv, lambda path: config)
    # An upstream the file already defines, given again by flag.
    argv += ["--upstream", "openai=http://localhost:8000"]
    with pytest.raises(ConfigError, match="openai"):
        proxy_config(argv, lambda path: DEPLOY / "proxy.toml")


def test_a_base_url_off_the_proxy_fails_the_check() -> None:
    config = load_config(str(DEPLOY / "proxy.toml"), {})
    check_base_urls({"URL": "http://proxy:8787/openai/v1"}, "proxy", config)
    for wrong in ("http://proxy:8788/openai/v1", "http://proxy:8787/openia/v1", "http://x:8787/"):
        with pytest.raises(AssertionError):
            check_base_urls({"URL": wrong}, "proxy", config)


# --------------------------------------------------------------------------------------------
# proxy.toml and the image
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def config() -> ProxyConfig:
    return load_config(str(DEPLOY / "proxy.toml"), {})


@pytest.fixture(scope="module")
def image() -> list[Instruction]:
    return dockerfile(DEPLOY / "Dockerfile")


def image_files(instructions: list[Instruction]) -> dict[str, Path]:
    """Files the image COPYs to a path of their own: path in the image -> file here."""
    found = {}
    for keyword, rest in instructions:
        if keyword == "COPY":
            *sources, target = rest.split()
            if len(sources) == 1 and not target.endswith("/"):
                found[target] = ROOT / sources[0]
    return found


def test_the_example_config_listens_everywhere_and_names_its_upstreams(
    config: ProxyConfig,
) -> None:
    # Reachable from the pod's other containers and the kubelet's probes, not only loopback.
    assert config.listen == ("0.0.0.0", 8787)
    assert config.metrics_listen == ("0.0.0.0", 9464)
    upstreams = {upstream.name: upstream.url for upstream in config.upstreams}
    assert upstreams == {
        "openai": "https://api.openai.com",
        "anthropic": "https://api.anthropic.com",
    }
    # The drain is set in the file, not left to the default the README does not show.
    assert "drain_timeout" in tomllib.loads((DEPLOY / "proxy.toml").read_text())
    assert config.drain_timeout > 0


def test_every_host_profile_the_deploy_files_mention_exists() -> None:
    named = [
        name
        for path in (DEPLOY / "proxy.toml", DEPLOY / "README.md", K8S / "otelsse-sidecar.yaml")
        for name in re.findall(r'host_profile = "([^"]+)"', path.read_text())
    ]
    assert named, "proxy.toml shows a host profile (commented out)"
    for name in named:
        assert get_route(name).profile is not None, f"{name} is a route, not a host profile"


def test_the_image_runs_the_proxy_on_its_config_as_a_non_root_user(
    image: list[Instruction], config: ProxyConfig
) -> None:
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", instruction(image, "FROM"))
    assert not [i for i in image if i.keyword == "ENTRYPOINT"], "CMD is the whole command"
    cmd = json.loads(instruction(image, "CMD"))
    assert cmd == ["otelsse", "proxy", "--config", IMAGE_CONFIG]
    files = image_files(image)
    assert files[IMAGE_CONFIG] == DEPLOY / "proxy.toml"
    assert proxy_config(cmd, files.__getitem__) == config
    # A numeric user (Kubernetes' runAsNonRoot can only check a number), created by the build.
    user, _, group = instruction(image, "USER").partition(":")
    assert user.isdigit(), user
    assert int(user) != 0
    runs = " ".join(i.rest for i in image if i.keyword == "RUN")
    assert re.search(rf"useradd .*--uid {user}\b", runs)
    if group:
        assert group.isdigit(), group
        assert int(group) != 0
        assert re.search(rf"groupadd .*--gid {group}\b", runs)
    assert instruction(image, "STOPSIGNAL") == "SIGTERM"


def test_the_image_exposes_the_configured_ports_and_checks_healthz(
    image: list[Instruction], config: ProxyConfig
) -> None:
    assert config.metrics_listen is not None
    exposed = {int(port.split("/")[0]) for port in instruction(image, "EXPOSE").split()}
    assert exposed == {config.listen[1], config.metrics_listen[1]}
    options, _, command = instruction(image, "HEALTHCHECK").partition("CMD ")
    assert re.fullmatch(r"(--[a-z-]+=\w+\s+)*", options), options
    program, flag, code = json.loads(command)
    assert (program, flag) == ("python", "-c")
    # The check the container runs: Python's urllib on the listen port's /healthz.
    tree = ast.parse(code)
    urls = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    assert urls == [f"http://127.0.0.1:{config.listen[1]}/healthz"], code
    called = {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert "urllib.request.urlopen" in called, code


def test_the_image_copies_what_the_build_needs() -> None:
    sources = copied(dockerfile(DEPLOY / "Dockerfile"))
    for source in sources:
        assert (ROOT / source).exists(), source
    # BuildKit reads <Dockerfile>.dockerignore beside it: it lets in exactly what is copied.
    assert dockerignore_allows(DEPLOY / "Dockerfile.dockerignore") == sources


# --------------------------------------------------------------------------------------------
# compose.yaml
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = load_yaml(DEPLOY / "compose.yaml")
    return loaded


def host_path(service: dict[str, Any], container_path: str) -> Path:
    """Where a path in a service's container comes from: a bind mount, or the image's COPY."""
    found = mounted(service, container_path, DEPLOY)
    if found is not None:
        return found
    build = service.get("build")
    assert build, f"{container_path} is neither mounted nor built in"
    image = dockerfile((DEPLOY / build["context"] / build["dockerfile"]).resolve())
    return image_files(image)[container_path]


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def compose_proxy_config(compose: dict[str, Any]) -> ProxyConfig:
    proxy = compose["services"]["otelsse-proxy"]
    return proxy_config(proxy["command"], lambda path: host_path(proxy, path))


def compose_collector(compose: dict[str, Any]) -> dict[str, Any]:
    collector = compose["services"]["otel-collector"]
    loaded: dict[str, Any] = load_yaml(host_path(collector, "/etc/otelcol-contrib/config.yaml"))
    return loaded


@pytest.mark.parametrize("path", [DEPLOY / "compose.yaml", EXAMPLES_COMPOSE / "compose.yaml"])
def test_compose_files_say_they_need_compose_v2(path: Path) -> None:
    # Their top-level name is the Compose Specification's: docker-compose v1 refuses it, and
    # Compose v2 calls a version key obsolete
    # (https://docs.docker.com/reference/compose-file/version-and-name/).
    loaded = load_yaml(path)
    assert "name" in loaded
    assert "version" not in loaded
    lines = path.read_text().splitlines()
    header = "\n".join(itertools.takewhile(lambda line: line.startswith("#"), lines))
    assert "Docker Compose v2" in header, path
    assert "`docker compose`, not `docker-compose` v1" in header, path


def test_compose_dependencies_builds_and_mounts_resolve(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"app", "otelsse-proxy", "fake-provider", "otel-collector", "prometheus", "jaeger"} <= (
        set(services)
    )
    for name, service in services.items():
        depends = service.get("depends_on", [])
        for dependency in depends:
            assert dependency in services, f"{name} depends on {dependency}, not a service"
        for source in mounts(service, DEPLOY).values():
            assert source.exists(), f"{name}: {source}"
        if "build" in service:
            context = (DEPLOY / service["build"]["context"]).resolve()
            assert context == ROOT, name
            assert (context / service["build"]["dockerfile"]).is_file(), name
    # The proxy is this folder's image; the app and the fake provider are the examples'.
    builds = {name: s["build"]["dockerfile"] for name, s in services.items() if "build" in s}
    assert builds == {
        "otelsse-proxy": "deploy/Dockerfile",
        "app": "examples/compose/Dockerfile",
        "fake-provider": "examples/compose/Dockerfile",
    }


def test_compose_reuses_the_examples_files_and_pins(compose: dict[str, Any]) -> None:
    services = compose["services"]
    collector = host_path(services["otel-collector"], "/etc/otelcol-contrib/config.yaml")
    assert collector == EXAMPLES_COMPOSE / "otel-collector.yaml"
    prometheus = services["prometheus"]
    assert host_path(prometheus, "/etc/prometheus/prometheus.yml") == (
        EXAMPLES_COMPOSE / "prometheus.yml"
    )
    assert host_path(prometheus, "/etc/prometheus/rules") == ROOT / "dashboards" / "prometheus"
    # No second copy of a collector or Prometheus config in deploy/ outside the manifests.
    assert sorted(p.name for p in DEPLOY.glob("*.y*ml")) == ["compose.yaml"]
    examples = load_yaml(EXAMPLES_COMPOSE / "compose.yaml")["services"]
    for name, service in services.items():
        if "image" in service:
            assert re.search(r":v?\d+\.\d+\.\d+$", service["image"]), name
            assert service["image"] == examples[name]["image"], f"{name}: the examples pin"


def test_compose_runs_the_proxy_with_its_config_and_the_fake_provider(
    compose: dict[str, Any], image: list[Instruction]
) -> None:
    services = compose["services"]
    proxy = services["otelsse-proxy"]
    config = compose_proxy_config(compose)
    # The image's command, with the fake provider added as an upstream.
    cmd = json.loads(instruction(image, "CMD"))
    assert proxy["command"][: len(cmd)] == cmd
    assert host_path(proxy, IMAGE_CONFIG) == DEPLOY / "proxy.toml"
    assert config.metrics_listen is not None
    exposed = {int(port) for port in instruction(image, "EXPOSE").split()}
    published = {int(str(port).rsplit(":", 1)[-1].split("/")[0]) for port in proxy["ports"]}
    assert published == {config.listen[1], config.metrics_listen[1]} == exposed
    assert seconds(proxy["stop_grace_period"]) > config.drain_timeout
    # The descriptors carry max_streams, or the proxy refuses to start (raise_descriptor_limit).
    nofile = proxy["ulimits"]["nofile"]
    assert nofile["soft"] <= nofile["hard"]
    assert nofile["hard"] >= 2 * config.max_streams + FD_RESERVE
    # The upstream "fake" is the fake provider, where it listens.
    provider = services["fake-provider"]
    provider_args = demo_args(provider["command"])
    assert provider_args.provider_only
    assert provider_args.host == "0.0.0.0"
    fake = config.upstream("fake")
    assert fake is not None
    assert (fake.base.host, fake.base.port) == ("fake-provider", provider_args.port)
    assert "fake-provider" in proxy["depends_on"]


def test_compose_app_streams_through_the_proxy_to_the_fake_provider(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    app = services["app"]
    config = compose_proxy_config(compose)
    env = environment(app)
    (base,) = check_base_urls(env, "otelsse-proxy", config)
    # The upstream it names is the fake provider (a compose service): no API key needed.
    upstream = config.upstream(first_segment(base))
    assert upstream is not None
    assert upstream.base.host in services
    # It starts once the proxy's HEALTHCHECK passes.
    assert app["depends_on"]["otelsse-proxy"]["condition"] == "service_healthy"
    # The script it loops over exists where it is mounted, with scenarios the provider knows.
    script = app["command"][-1]
    (path,) = re.findall(r"python (\S+\.py)", script)
    assert host_path(app, path).is_file()
    assert "$$SCENARIOS" in script
    scenarios = env["SCENARIOS"].split()
    assert scenarios
    assert set(scenarios) <= set(SCENARIOS)


def test_compose_telemetry_reaches_the_collector_prometheus_and_jaeger(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    collector = compose_collector(compose)
    check_pipelines(collector)
    endpoint, protocol = otlp_target(environment(services["otelsse-proxy"]))
    assert endpoint.hostname == "otel-collector"
    assert endpoint.port == otlp_receiver_port(collector, protocol)
    assert "otel-collector" in services["otelsse-proxy"]["depends_on"]
    # Spans go to a compose service; Prometheus scrapes the collector's exporter.
    for exporter in collector["service"]["pipelines"]["traces"]["exporters"]:
        host = collector["exporters"][exporter]["endpoint"].split(":")[0]
        assert host in services, exporter
    (metrics,) = collector["service"]["pipelines"]["metrics"]["exporters"]
    port = endpoint_port(collector["exporters"][metrics]["endpoint"])
    prometheus = load_yaml(host_path(services["prometheus"], "/etc/prometheus/prometheus.yml"))
    targets = [
        target
        for job in prometheus["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    ]
    assert targets == [f"otel-collector:{port}"]
    # Grafana's data sources are services of this stack.
    grafana = services["grafana"]
    sources = host_path(grafana, "/etc/grafana/provisioning") / "datasources" / "datasources.yaml"
    for source in load_yaml(sources)["datasources"]:
        assert url(source["url"]).hostname in services, source["url"]


# --------------------------------------------------------------------------------------------
# Kubernetes
# --------------------------------------------------------------------------------------------


class Manifests(NamedTuple):
    objects: dict[tuple[str, str], dict[str, Any]]  # (kind, name) -> object

    def get(self, kind: str, name: str) -> dict[str, Any]:
        assert (kind, name) in self.objects, f"no {kind} {name}"
        return self.objects[kind, name]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for (k, _), o in self.objects.items() if k == kind]


@pytest.fixture(scope="module")
def k8s() -> Manifests:
    objects = {}
    for path in sorted(K8S.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            assert document["apiVersion"], path
            assert document["kind"], path
            key = (document["kind"], document["metadata"]["name"])
            assert key not in objects, f"{key} defined twice"
            objects[key] = document
    assert {path.name for path in K8S.iterdir()} == {"otelsse-sidecar.yaml", "otel-collector.yaml"}
    return Manifests(objects)


def pod_spec(k8s: Manifests, deployment: str) -> dict[str, Any]:
    spec: dict[str, Any] = k8s.get("Deployment", deployment)["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items(), deployment
    pod: dict[str, Any] = spec["template"]["spec"]
    return pod


def sidecar(pod: dict[str, Any]) -> dict[str, Any]:
    (proxy,) = [c for c in pod.get("initContainers", ()) if c["name"] == "otelsse-proxy"]
    return proxy


def container_argv(container: dict[str, Any], image: list[Instruction]) -> list[str]:
    """What Kubernetes runs: ``command`` replaces the image's ENTRYPOINT (and drops its CMD),
    ``args`` its CMD. The proxy's image has no ENTRYPOINT."""
    if "command" in container:
        return list(container["command"]) + list(container.get("args", []))
    return list(container.get("args", json.loads(instruction(image, "CMD"))))


def mounted_text(k8s: Manifests, pod: dict[str, Any], container: dict[str, Any], path: str) -> str:
    """The text of ``path`` in ``container``: a key of the ConfigMap mounted above it."""
    for mount in container.get("volumeMounts", ()):
        directory = mount["mountPath"].rstrip("/")
        if path.startswith(directory + "/"):
            name = path[len(directory) + 1 :]
            (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
            source = volume["configMap"]
            data: dict[str, str] = k8s.get("ConfigMap", source["name"])["data"]
            # With items, only the keys listed are files, at their paths.
            files = {item["path"]: item["key"] for item in source.get("items", ())}
            key = files.get(name) if files else name
            assert key in data, f"{path}: ConfigMap {source['name']} puts no file there"
            return data[key]
    raise AssertionError(f"{path} is not mounted in {container['name']}")


def container_ports(container: dict[str, Any]) -> dict[str, int]:
    return {port["name"]: port["containerPort"] for port in container.get("ports", ())}


def probe_port(container: dict[str, Any], probe: str) -> tuple[str, int]:
    """A probe's path and the port number it resolves to."""
    get = container[probe]["httpGet"]
    port = get["port"]
    return get["path"], container_ports(container)[port] if isinstance(port, str) else port


def env_values(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", ()) if "value" in e}


@pytest.fixture(scope="module")
def pod(k8s: Manifests) -> dict[str, Any]:
    return pod_spec(k8s, "llm-app")


@pytest.fixture(scope="module")
def k8s_config(
    k8s: Manifests, pod: dict[str, Any], image: list[Instruction], tmp_path_factory: Any
) -> ProxyConfig:
    """The configuration the sidecar starts with: its command, its mounted ConfigMap."""
    proxy = sidecar(pod)
    directory = tmp_path_factory.mktemp("k8s")

    def files(path: str) -> Path:
        copy = directory / Path(path).name
        copy.write_text(mounted_text(k8s, pod, proxy, path))
        return copy

    return proxy_config(container_argv(proxy, image), files)


def test_the_configmap_is_the_example_config(k8s_config: ProxyConfig, config: ProxyConfig) -> None:
    assert k8s_config == config


def test_the_proxy_is_a_native_sidecar_with_its_ports_and_probes(
    pod: dict[str, Any], k8s_config: ProxyConfig, image: list[Instruction]
) -> None:
    proxy = sidecar(pod)
    assert proxy["restartPolicy"] == "Always"
    assert k8s_config.metrics_listen is not None
    ports = container_ports(proxy)
    assert sorted(ports.values()) == sorted([k8s_config.listen[1], k8s_config.metrics_listen[1]])
    exposed = {int(port) for port in instruction(image, "EXPOSE").split()}
    assert set(ports.values()) == exposed
    listen = k8s_config.listen[1]
    assert probe_port(proxy, "readinessProbe") == ("/readyz", listen)
    assert probe_port(proxy, "livenessProbe") == ("/healthz", listen)
    assert probe_port(proxy, "startupProbe") == ("/healthz", listen)
    assert pod["terminationGracePeriodSeconds"] > k8s_config.drain_timeout
    # The image's user is the one runAsNonRoot accepts; the config is mounted read-only.
    assert proxy["securityContext"]["runAsNonRoot"] is True
    assert all(mount.get("readOnly") for mount in proxy["volumeMounts"])


def test_every_container_has_requests_and_limits(k8s: Manifests) -> None:
    containers = [
        container
        for deployment in k8s.of_kind("Deployment")
        for key in ("initContainers", "containers")
        for container in deployment["spec"]["template"]["spec"].get(key, ())
    ]
    assert len(containers) >= 3
    for container in containers:
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"]), container["name"]
        assert "memory" in resources["limits"], container["name"]


def test_the_app_reaches_the_providers_through_the_sidecar(
    pod: dict[str, Any], k8s_config: ProxyConfig
) -> None:
    (app,) = pod["containers"]
    bases = check_base_urls(env_values(app), "127.0.0.1", k8s_config)
    assert {first_segment(base) for base in bases} == {"openai", "anthropic"}


def test_the_sidecar_pushes_to_the_collector_service(k8s: Manifests, pod: dict[str, Any]) -> None:
    env = env_values(sidecar(pod))
    endpoint, protocol = otlp_target(env)
    service = k8s.get("Service", str(endpoint.hostname))
    collector_pod = pod_spec(k8s, "otel-collector")
    labels = k8s.get("Deployment", "otel-collector")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    (service_port,) = [p for p in service["spec"]["ports"] if p["port"] == endpoint.port]
    (container,) = collector_pod["containers"]
    target = service_port.get("targetPort", service_port["port"])
    port = container_ports(container)[target] if isinstance(target, str) else target
    collector = load_yaml_text(collector_config_text(k8s, collector_pod, container))
    assert port == otlp_receiver_port(collector, protocol)
    # Each pod its own series (the instance label), from the downward API.
    attributes = dict(item.split("=", 1) for item in env["OTEL_RESOURCE_ATTRIBUTES"].split(","))
    assert attributes["service.instance.id"] == "$(POD_NAME)"
    (pod_name,) = [e for e in sidecar(pod)["env"] if e["name"] == "POD_NAME"]
    assert pod_name["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def load_yaml_text(text: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


def collector_config_text(k8s: Manifests, pod: dict[str, Any], container: dict[str, Any]) -> str:
    (config,) = [arg.split("=", 1)[1] for arg in container["args"] if arg.startswith("--config=")]
    return mounted_text(k8s, pod, container, config)


def test_the_k8s_collector_is_wired_and_scraped_once(k8s: Manifests, pod: dict[str, Any]) -> None:
    collector_pod = pod_spec(k8s, "otel-collector")
    (container,) = collector_pod["containers"]
    collector = load_yaml_text(collector_config_text(k8s, collector_pod, container))
    check_pipelines(collector)
    ports = container_ports(container)
    for protocol in ("grpc", "http/protobuf"):
        assert otlp_receiver_port(collector, protocol) in ports.values(), protocol
    health = endpoint_port(collector["extensions"]["health_check"]["endpoint"])
    for probe in ("livenessProbe", "readinessProbe"):
        assert probe_port(container, probe)[1] == health, probe
    assert (
        container["image"]
        == (load_yaml(EXAMPLES_COMPOSE / "compose.yaml")["services"]["otel-collector"]["image"])
    )
    # Prometheus scrapes the collector's exporter, through its pod's annotations.
    (metrics,) = collector["service"]["pipelines"]["metrics"]["exporters"]
    assert metrics.split("/")[0] == "prometheus"
    exporter_port = endpoint_port(collector["exporters"][metrics]["endpoint"])
    annotations = k8s.get("Deployment", "otel-collector")["spec"]["template"]["metadata"][
        "annotations"
    ]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == exporter_port
    assert exporter_port in ports.values()
    # The proxies push their metrics there: scraping their pods too would count streams twice.
    proxies = k8s.get("Deployment", "llm-app")["spec"]["template"]["metadata"]
    assert proxies.get("annotations", {}).get("prometheus.io/scrape") != "true"


# --------------------------------------------------------------------------------------------
# The README
# --------------------------------------------------------------------------------------------


def test_the_readme_describes_every_file() -> None:
    readme = (DEPLOY / "README.md").read_text()
    files = [
        path.relative_to(DEPLOY).as_posix()
        for path in DEPLOY.rglob("*")
        if path.is_file() and path.name != "README.md"
    ]
    assert len(files) >= 6
    for name in files:
        assert f"| `{name}` |" in readme, name
