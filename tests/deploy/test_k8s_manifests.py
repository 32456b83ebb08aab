"""deploy/ rendered with the real kustomize and checked without a cluster.

* Core kinds against the Kubernetes OpenAPI schemas of ``K8S_VERSION``
  (kubernetes-validate, strict: an unknown field fails).
* KEDA's ScaledObject and Prometheus Operator's ServiceMonitor, PodMonitor and
  PrometheusRule against the models generated from their CRDs (cloudcoil-models-keda,
  cloudcoil-models-prometheus-operator); those models ignore unknown fields, so each object
  must also survive a round trip unchanged (a misspelt field is dropped and caught).
* Every PromQL expression (alerts, the KEDA query) parses (promql-parser).
* Security, resources, probes, selectors, and what the NetworkPolicies let through.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from pydantic import BaseModel

from tests.deploy.kube import (
    BASE,
    DEPLOY,
    EXAMPLE,
    Doc,
    Peer,
    allowed,
    containers,
    of_kind,
    one,
    pod_specs,
    queries,
    render,
    selectors,
)

K8S_VERSION = "1.31.0"  # the oldest release with every field used here (preStop sleep: 1.30)
CRD_KINDS = {"ScaledObject", "ServiceMonitor", "PodMonitor", "PrometheusRule"}
NAMESPACE = "reprompt"
COMPONENTS = ("api", "worker", "redis")


@pytest.fixture(scope="module")
def example() -> tuple[Doc, ...]:
    return render(EXAMPLE)


def crd_model(kind: str) -> type[BaseModel]:
    from cloudcoil.models.keda import v1alpha1 as keda
    from cloudcoil.models.prometheus_operator import v1 as monitoring

    models: dict[str, type[BaseModel]] = {
        "ScaledObject": keda.ScaledObject,
        "ServiceMonitor": monitoring.ServiceMonitor,
        "PodMonitor": monitoring.PodMonitor,
        "PrometheusRule": monitoring.PrometheusRule,
    }
    return models[kind]


def crd_problem(doc: Doc) -> str | None:
    """Why ``doc`` does not fit its CRD's schema, or None."""
    model = crd_model(doc["kind"]).model_validate(doc)
    again = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return None if again == doc else f"fields not in the schema were dropped: {_diff(doc, again)}"


def _diff(want: Any, got: Any, path: str = "") -> list[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{path}.{k}" for k in want if k not in got]
        for key in want.keys() & got.keys():
            out += _diff(want[key], got[key], f"{path}.{key}")
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [
            d
            for i, (a, b) in enumerate(zip(want, got, strict=True))
            for d in _diff(a, b, f"{path}[{i}]")
        ]
    return [] if want == got else [path]


# -- rendering and schemas ---------------------------------------------------------------


@pytest.mark.parametrize("path", [BASE, EXAMPLE], ids=["base", "example"])
def test_every_kustomization_renders_and_every_core_object_fits_its_schema(path: Path) -> None:
    docs = render(path)
    assert {doc["kind"] for doc in docs} >= {
        "Deployment",
        "Service",
        "ConfigMap",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ScaledObject",
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
    }
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_a_misspelt_field_fails_the_core_schema(example: tuple[Doc, ...]) -> None:
    deployment = one(example, "Deployment", "reprompt-worker")
    bad = {**deployment, "spec": {**deployment["spec"], "terminationGracePeriod": 45}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


@pytest.mark.parametrize("path", [BASE, EXAMPLE], ids=["base", "example"])
def test_keda_and_prometheus_operator_objects_fit_their_crds(path: Path) -> None:
    docs = [doc for doc in render(path) if doc["kind"] in CRD_KINDS]
    assert {doc["kind"] for doc in docs} == CRD_KINDS
    for doc in docs:
        assert crd_problem(doc) is None, (
            f"{doc['kind']}/{doc['metadata']['name']}: {crd_problem(doc)}"
        )


def test_a_misspelt_crd_field_is_caught(example: tuple[Doc, ...]) -> None:
    scaled = one(example, "ScaledObject", "reprompt-worker")
    typo = {**scaled, "spec": {**scaled["spec"], "minReplicas": 0}}
    problem = crd_problem(typo)
    assert problem is not None
    assert ".spec.minReplicas" in problem
    rule = one(example, "PrometheusRule", "reprompt")
    wrong_type = {**rule, "spec": {"groups": [{"name": "x", "rules": "not a list"}]}}
    with pytest.raises(ValueError, match="rules"):
        crd_problem(wrong_type)


def test_every_promql_expression_parses(example: tuple[Doc, ...]) -> None:
    exprs = queries(example)
    assert len(exprs) >= 7
    for where, expr in exprs:
        assert selectors(expr), f"{where}: no metric in {expr!r}"
    with pytest.raises(ValueError, match="parenthesis"):
        selectors("sum(rate(reprompt_turns_total[5m])")


def test_the_overlay_puts_everything_in_its_namespace(example: tuple[Doc, ...]) -> None:
    for doc in example:
        if doc["kind"] == "Namespace":
            assert doc["metadata"]["name"] == NAMESPACE
        else:
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]["name"]


# -- secrets -------------------------------------------------------------------------------


def test_no_secret_is_committed_or_rendered(example: tuple[Doc, ...]) -> None:
    assert not of_kind(example, "Secret")
    for workload, container in containers(example):
        for env in container.get("env", []):
            name = env["name"]
            if re.search(r"KEY|PASSWORD|SECRET|TOKEN|REDIS_URL", name):
                assert "value" not in env, f"{workload['metadata']['name']}: {name} is inline"
                assert "secretKeyRef" in env["valueFrom"], name
    key_shaped = re.compile(r"sk-[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9+/=]{16,}|redis://:[^@\s]+@")
    for path in DEPLOY.rglob("*"):
        if path.is_file():
            assert not key_shaped.search(path.read_text()), f"{path} holds a secret"


def test_the_secrets_the_pods_need_are_the_documented_ones(example: tuple[Doc, ...]) -> None:
    refs: set[tuple[str, str]] = set()
    for _, container in containers(example):
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                refs.add((ref["name"], ref["key"]))
    assert refs == {
        ("reprompt", "redis-url"),
        ("reprompt", "redis-password"),
        ("reprompt", "api-keys"),
        ("reprompt", "webhook-signing-key"),
    }
    doc = (DEPLOY.parent / "docs" / "kubernetes.md").read_text()
    assert "create secret generic reprompt " in doc
    for _, key in refs:
        assert f"--from-literal={key}=" in doc or f"--from-file={key}=" in doc, key
    assert "create secret generic reprompt-provider-keys" in doc


# -- pods ------------------------------------------------------------------------------------


def test_every_pod_runs_restricted(example: tuple[Doc, ...]) -> None:
    for workload, spec in pod_specs(example):
        name = workload["metadata"]["name"]
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True, name
        assert pod["runAsUser"] != 0, name
        assert pod["seccompProfile"]["type"] == "RuntimeDefault", name
        assert spec["automountServiceAccountToken"] is False, name
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["readOnlyRootFilesystem"] is True, name
            assert context.get("privileged", False) is False, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            assert "add" not in context["capabilities"], name
            resources = container["resources"]
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= resources[kind].keys(), f"{name}: {kind}"
            writable = {
                m["mountPath"] for m in container.get("volumeMounts", []) if not m.get("readOnly")
            }
            volumes = {v["name"]: v for v in spec.get("volumes", [])}
            for mount in container.get("volumeMounts", []):
                if mount["name"] in volumes and not mount.get("readOnly"):
                    assert "emptyDir" in volumes[mount["name"]], f"{name}: {mount['name']}"
            if container["name"] != "redis":
                assert "/tmp" in writable, name


def test_the_pods_are_probed_and_the_api_drains_from_its_endpoints(
    example: tuple[Doc, ...],
) -> None:
    api = one(example, "Deployment", "reprompt-api")["spec"]["template"]["spec"]["containers"][0]
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert api["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert api["lifecycle"]["preStop"]["sleep"]["seconds"] > 0
    worker = one(example, "Deployment", "reprompt-worker")
    assert "replicas" not in worker["spec"], "KEDA owns the workers' replicas"
    assert worker["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]


def test_selectors_find_their_pods(example: tuple[Doc, ...]) -> None:
    labels = {
        w["metadata"]["name"]: w["spec"]["template"]["metadata"]["labels"]
        for w, _ in pod_specs(example)
    }

    def selects(selector: dict[str, str]) -> set[str]:
        return {name for name, pod in labels.items() if selector.items() <= pod.items()}

    api_service = one(example, "Service", "reprompt-api")
    assert selects(api_service["spec"]["selector"]) == {"reprompt-api"}
    for pdb in of_kind(example, "PodDisruptionBudget"):
        assert len(selects(pdb["spec"]["selector"]["matchLabels"])) == 1, pdb["metadata"]["name"]
    scaled = one(example, "ScaledObject", "reprompt-worker")
    assert scaled["spec"]["scaleTargetRef"]["name"] == "reprompt-worker"
    monitor = one(example, "ServiceMonitor", "reprompt-api")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items()
        <= api_service["metadata"]["labels"].items()
    )
    service_ports = {p["name"] for p in api_service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= service_ports
    pods = one(example, "PodMonitor", "reprompt-worker")
    assert selects(pods["spec"]["selector"]["matchLabels"]) == {"reprompt-worker"}
    worker = one(example, "Deployment", "reprompt-worker")["spec"]["template"]["spec"]
    worker_ports = {p["name"] for c in worker["containers"] for p in c.get("ports", [])}
    assert {e["port"] for e in pods["spec"]["podMetricsEndpoints"]} <= worker_ports
    # The component label the alerts and KEDA select on comes from the pods' label.
    for monitor_doc, endpoints in ((monitor, "endpoints"), (pods, "podMetricsEndpoints")):
        relabel = monitor_doc["spec"][endpoints][0]["relabelings"][0]
        assert relabel["targetLabel"] == "component"
        assert relabel["sourceLabels"] == [
            "__meta_kubernetes_pod_label_app_kubernetes_io_component"
        ]


def test_the_api_and_redis_keep_a_pod_through_voluntary_disruptions(
    example: tuple[Doc, ...],
) -> None:
    api = one(example, "PodDisruptionBudget", "reprompt-api")["spec"]
    assert api["minAvailable"] == 1
    assert one(example, "Deployment", "reprompt-api")["spec"]["replicas"] > api["minAvailable"]
    assert one(example, "PodDisruptionBudget", "reprompt-worker")["spec"]["maxUnavailable"] == 1


# -- network policies ------------------------------------------------------------------------


def test_only_the_api_is_reachable_and_each_pod_reaches_only_what_it_needs(
    example: tuple[Doc, ...],
) -> None:
    policies = of_kind(example, "NetworkPolicy")
    pods = {
        component: one(example, kind, f"reprompt-{component}")["spec"]["template"]["spec"]
        for component, kind in (
            ("api", "Deployment"),
            ("worker", "Deployment"),
            ("redis", "StatefulSet"),
        )
    }
    pod = {
        component: Peer(
            pod=one(example, kind, f"reprompt-{component}")["spec"]["template"]["metadata"][
                "labels"
            ],
            namespace=NAMESPACE,
        )
        for component, kind in (
            ("api", "Deployment"),
            ("worker", "Deployment"),
            ("redis", "StatefulSet"),
        )
    }
    internet = Peer(ip="203.0.113.7")
    neighbour = Peer(pod={"app": "something-else"}, namespace=NAMESPACE)
    other_namespace = Peer(pod={"app": "x"}, namespace="default")
    prometheus = Peer(pod={"app.kubernetes.io/name": "prometheus"}, namespace="monitoring")
    dns = Peer(pod={"k8s-app": "kube-dns"}, namespace="kube-system")

    def can(source: Peer, target: Peer, port: int, protocol: str = "TCP") -> bool:
        return allowed(
            policies, source=source, target=target, port=port, protocol=protocol, pods=pods
        )

    # Ingress: the API from anywhere; nothing else from outside.
    assert can(internet, pod["api"], 8080)
    assert can(other_namespace, pod["api"], 8080)
    assert not can(internet, pod["api"], 9101)
    for source in (internet, neighbour, other_namespace):
        assert not can(source, pod["worker"], 9101)
        assert not can(source, pod["redis"], 6379)
    assert can(prometheus, pod["worker"], 9101)
    # Redis only from the API and the workers.
    assert can(pod["api"], pod["redis"], 6379)
    assert can(pod["worker"], pod["redis"], 6379)
    assert not can(pod["redis"], pod["redis"], 6379)
    # Egress: DNS for both; providers (public HTTPS) for workers only.
    for component in ("api", "worker"):
        assert can(pod[component], dns, 53, "UDP")
        assert not can(pod[component], Peer(ip="10.0.0.9"), 6379)
        assert not can(pod[component], pod["api"], 8080)
    assert can(pod["worker"], Peer(ip="104.18.6.192"), 443)
    assert not can(pod["worker"], Peer(ip="104.18.6.192"), 80)
    assert not can(pod["worker"], Peer(ip="169.254.169.254"), 443)
    assert not can(pod["worker"], Peer(ip="10.1.2.3"), 443)
    assert not can(pod["api"], Peer(ip="104.18.6.192"), 443)
    assert not can(pod["redis"], Peer(ip="104.18.6.192"), 443)
