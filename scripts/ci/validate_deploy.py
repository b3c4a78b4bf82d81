#!/usr/bin/python3
"""Offline checks of the deployment files (no cluster, no container engine here):
deploy/k8s/*.yaml against a strict structural schema of the fields matserve uses, their
cross-references, and the Dockerfile against the repository and the manifests.

What it checks (exit 1 on any error):
  k8s   every document parses; apiVersion/kind is a known pair; metadata.name is a DNS-1123 name;
        no unknown field anywhere in the objects it knows (typos fail: a strict subset of the
        Kubernetes OpenAPI for Deployment, Service, PodDisruptionBudget, ServiceMonitor,
        Kustomization); value types (int, str, bool, list, map); selectors match the pod
        template labels; Service targetPorts and probe ports name/number container ports; port
        names <= 15 chars and unique; each probe has exactly one handler; resource requests <=
        limits and nvidia.com/gpu requested == limited; terminationGracePeriodSeconds >= preStop
        sleep + --shutdown_grace_seconds; Prometheus annotations name the metrics port;
        kustomization resources exist.
  docker every FROM names a CUDA 13 devel/runtime image via ARGs; scripts the Dockerfile runs
        exist and are executable; install-deps.sh is the install step; EXPOSE matches the
        manifests' container ports; USER is numeric non-root and equals runAsUser; the
        HEALTHCHECK command is a binary the image ships and a CLI command that exists.
What it cannot check: the real Kubernetes OpenAPI schemas (not available offline), admission
(quota, the device plugin, RuntimeClass), that the image builds, or that the base tags exist.
"""
import os
import re
import sys

import yaml

ROOT = (os.environ.get("MATSERVE_ROOT")  # another checkout (the script's own tests)
        or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
K8S = os.path.join(ROOT, "deploy", "k8s")
errors = []

# --- a strict schema of the fields in use: dict = object with these keys, [x] = list of x -------
INT, STR, BOOL = int, str, bool
QTY = (int, str)  # resource quantities
LABELS = {"*": STR}
META = {"name": STR, "labels": LABELS, "annotations": LABELS, "namespace": STR}
PORT_REF = (int, str)
PROBE = {"grpc": {"port": INT, "service": STR}, "httpGet": {"port": PORT_REF, "path": STR},
         "tcpSocket": {"port": PORT_REF}, "exec": {"command": [STR]},
         "initialDelaySeconds": INT, "periodSeconds": INT, "timeoutSeconds": INT,
         "successThreshold": INT, "failureThreshold": INT, "terminationGracePeriodSeconds": INT}
HANDLER = {"exec": {"command": [STR]}, "sleep": {"seconds": INT}}
CONTAINER = {
    "name": STR, "image": STR, "imagePullPolicy": STR, "args": [STR], "command": [STR],
    "env": [{"name": STR, "value": STR,
             "valueFrom": {"secretKeyRef": {"name": STR, "key": STR, "optional": BOOL},
                           "configMapKeyRef": {"name": STR, "key": STR, "optional": BOOL}}}],
    "ports": [{"name": STR, "containerPort": INT, "protocol": STR}],
    "resources": {"requests": {"*": QTY}, "limits": {"*": QTY}},
    "startupProbe": PROBE, "readinessProbe": PROBE, "livenessProbe": PROBE,
    "lifecycle": {"preStop": HANDLER, "postStart": HANDLER},
    "securityContext": {"allowPrivilegeEscalation": BOOL, "readOnlyRootFilesystem": BOOL,
                        "runAsNonRoot": BOOL, "runAsUser": INT,
                        "capabilities": {"drop": [STR], "add": [STR]}},
    "volumeMounts": [{"name": STR, "mountPath": STR, "readOnly": BOOL}],
}
SELECTOR = {"matchLabels": LABELS}
POD_SPEC = {
    "terminationGracePeriodSeconds": INT, "containers": [CONTAINER],
    "securityContext": {"runAsNonRoot": BOOL, "runAsUser": INT, "runAsGroup": INT,
                        "fsGroup": INT, "seccompProfile": {"type": STR}},
    "volumes": [{"name": STR, "emptyDir": {"medium": STR, "sizeLimit": STR},
                 "secret": {"secretName": STR}}],
    "tolerations": [{"key": STR, "operator": STR, "value": STR, "effect": STR}],
    "nodeSelector": LABELS, "runtimeClassName": STR, "serviceAccountName": STR,
}
SCHEMAS = {
    ("apps/v1", "Deployment"): {
        "apiVersion": STR, "kind": STR, "metadata": META,
        "spec": {"replicas": INT, "revisionHistoryLimit": INT, "selector": SELECTOR,
                 "strategy": {"type": STR, "rollingUpdate": {"maxUnavailable": QTY,
                                                             "maxSurge": QTY}},
                 "template": {"metadata": META, "spec": POD_SPEC}}},
    ("v1", "Service"): {
        "apiVersion": STR, "kind": STR, "metadata": META,
        "spec": {"type": STR, "clusterIP": STR, "publishNotReadyAddresses": BOOL,
                 "selector": LABELS,
                 "ports": [{"name": STR, "port": INT, "targetPort": PORT_REF, "protocol": STR,
                            "appProtocol": STR}]}},
    ("policy/v1", "PodDisruptionBudget"): {
        "apiVersion": STR, "kind": STR, "metadata": META,
        "spec": {"minAvailable": QTY, "maxUnavailable": QTY, "selector": SELECTOR}},
    ("monitoring.coreos.com/v1", "ServiceMonitor"): {
        "apiVersion": STR, "kind": STR, "metadata": META,
        "spec": {"selector": SELECTOR,
                 "endpoints": [{"port": STR, "path": STR, "interval": STR, "scheme": STR}]}},
    ("kustomize.config.k8s.io/v1beta1", "Kustomization"): {
        "apiVersion": STR, "kind": STR, "resources": [STR], "namespace": STR},
}
REQUIRED = {"Deployment": ["spec.selector", "spec.template.spec.containers"],
            "Service": ["spec.ports"], "PodDisruptionBudget": ["spec.selector"],
            "ServiceMonitor": ["spec.selector", "spec.endpoints"], "Kustomization": ["resources"]}


def err(where, msg):
    errors.append(f"{where}: {msg}")


def check_schema(value, schema, where):
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return err(where, f"expected a map, got {type(value).__name__}")
        for k, v in value.items():
            sub = schema.get(k, schema.get("*"))
            if sub is None:
                err(where, f"unknown field '{k}'")
            else:
                check_schema(v, sub, f"{where}.{k}")
    elif isinstance(schema, list):
        if not isinstance(value, list):
            return err(where, f"expected a list, got {type(value).__name__}")
        for i, v in enumerate(value):
            check_schema(v, schema[0], f"{where}[{i}]")
    else:
        types = schema if isinstance(schema, tuple) else (schema,)
        if isinstance(value, bool) and bool not in types:
            return err(where, f"expected {schema}, got a boolean")
        if not isinstance(value, types):
            err(where, f"expected {'/'.join(t.__name__ for t in types)}, got "
                       f"{type(value).__name__} ({value!r})")


def get(obj, path):
    for part in path.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def quantity(q):
    """A resource quantity in base units (cpu cores, bytes, counts)."""
    q = str(q)
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
             "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", q)
    if not m or (m.group(2) and m.group(2) not in units):
        raise ValueError(q)
    return float(m.group(1)) * units.get(m.group(2), 1)


def flag(args, name):
    for a in args or []:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def check_k8s():
    docs = []
    for fn in sorted(os.listdir(K8S)):
        if not fn.endswith(".yaml"):
            continue
        with open(os.path.join(K8S, fn)) as f:
            try:
                for d in yaml.safe_load_all(f):
                    if d is not None:
                        docs.append((fn, d))
            except yaml.YAMLError as e:
                err(fn, f"YAML: {e}")
    by_kind = {}
    for fn, d in docs:
        key = (d.get("apiVersion"), d.get("kind"))
        where = f"{fn}:{d.get('kind')}/{get(d, 'metadata.name')}"
        if key not in SCHEMAS:
            err(where, f"unknown apiVersion/kind {key}")
            continue
        check_schema(d, SCHEMAS[key], where)
        for path in REQUIRED[key[1]]:
            if get(d, path) is None:
                err(where, f"missing {path}")
        name = get(d, "metadata.name")
        if key[1] != "Kustomization":
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name or "") or len(name) > 63:
                err(where, f"metadata.name {name!r} is not a DNS-1123 label")
        by_kind.setdefault(key[1], []).append((where, d))

    deployments = by_kind.get("Deployment", [])
    if len(deployments) != 1:
        err("deploy/k8s", f"expected one Deployment, found {len(deployments)}")
        return None
    where, dep = deployments[0]
    pod_labels = get(dep, "spec.template.metadata.labels") or {}
    sel = get(dep, "spec.selector.matchLabels") or {}
    if not sel or any(pod_labels.get(k) != v for k, v in sel.items()):
        err(where, "spec.selector.matchLabels does not match the pod template labels")
    pod = get(dep, "spec.template.spec") or {}
    ports = {}
    for c in pod.get("containers", []):
        cw = f"{where}.containers[{c.get('name')}]"
        names = set()
        for p in c.get("ports", []):
            n = p.get("name", "")
            if len(n) > 15 or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", n) or n in names:
                err(cw, f"port name {n!r} invalid or repeated")
            names.add(n)
            ports[n] = p.get("containerPort")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            pr = c.get(probe)
            if pr is None:
                err(cw, f"no {probe}")
                continue
            handlers = [h for h in ("grpc", "httpGet", "tcpSocket", "exec") if h in pr]
            if len(handlers) != 1:
                err(cw, f"{probe} needs exactly one handler, has {handlers}")
            port = get(pr, "grpc.port")
            if "grpc" in pr and port not in ports.values():
                err(cw, f"{probe}.grpc.port {port} is not a container port")
        res = c.get("resources", {})
        req, lim = res.get("requests", {}), res.get("limits", {})
        if "nvidia.com/gpu" not in lim:
            err(cw, "no nvidia.com/gpu limit")
        for k in set(req) | set(lim):
            try:
                if k in req and k in lim and quantity(req[k]) > quantity(lim[k]):
                    err(cw, f"request {k}={req[k]} exceeds its limit {lim[k]}")
            except ValueError as e:
                err(cw, f"bad quantity {e}")
        if "nvidia.com/gpu" in req and str(req["nvidia.com/gpu"]) != str(lim.get("nvidia.com/gpu")):
            err(cw, "extended resource nvidia.com/gpu: request must equal limit")
        grace = flag(c.get("args"), "shutdown_grace_seconds")
        pre = get(c, "lifecycle.preStop.exec.command") or []
        pre_s = int(pre[1]) if len(pre) == 2 and pre[0] == "sleep" else 0
        tgps = pod.get("terminationGracePeriodSeconds", 30)
        if grace is None:
            err(cw, "no --shutdown_grace_seconds in args")
        elif tgps < pre_s + int(grace):
            err(where, f"terminationGracePeriodSeconds {tgps} < preStop {pre_s} s + "
                       f"drain {grace} s")
    if pod.get("securityContext", {}).get("runAsNonRoot") is not True:
        err(where, "pod securityContext.runAsNonRoot must be true")

    services = by_kind.get("Service", [])
    headless = [s for s in services if get(s[1], "spec.clusterIP") == "None"]
    if not headless:
        err("deploy/k8s", "no headless Service (clusterIP: None) for client-side round-robin")
    for sw, svc in services:
        ssel = get(svc, "spec.selector") or {}
        if not ssel or any(pod_labels.get(k) != v for k, v in ssel.items()):
            err(sw, "spec.selector does not select the Deployment's pods")
        for p in get(svc, "spec.ports") or []:
            tp = p.get("targetPort")
            if (isinstance(tp, str) and tp not in ports) or (isinstance(tp, int) and
                                                              tp not in ports.values()):
                err(sw, f"targetPort {tp!r} is not a container port")
        ann = get(svc, "metadata.annotations") or {}
        if ann.get("prometheus.io/scrape") == "true":
            if ann.get("prometheus.io/port") != str(ports.get("metrics")):
                err(sw, "prometheus.io/port does not name the metrics container port")
    if not any((get(s, "metadata.annotations") or {}).get("prometheus.io/scrape") == "true"
               for _, s in services) and not by_kind.get("ServiceMonitor"):
        err("deploy/k8s", "no Prometheus scrape annotations or ServiceMonitor")
    for mw, sm in by_kind.get("ServiceMonitor", []):
        msel = get(sm, "spec.selector.matchLabels") or {}
        targets = [s for _, s in services
                   if all((get(s, "metadata.labels") or {}).get(k) == v for k, v in msel.items())]
        if not targets:
            err(mw, "selector matches no Service")
        for e in get(sm, "spec.endpoints") or []:
            if not any(e.get("port") == p.get("name") for s in targets
                       for p in get(s, "spec.ports") or []):
                err(mw, f"endpoint port {e.get('port')!r} is no port of the selected Service")
    for pw, pdb in by_kind.get("PodDisruptionBudget", []):
        psel = get(pdb, "spec.selector.matchLabels") or {}
        if any(pod_labels.get(k) != v for k, v in psel.items()):
            err(pw, "selector does not select the Deployment's pods")
    for kw, k in by_kind.get("Kustomization", []):
        for r in k.get("resources", []):
            if not os.path.exists(os.path.join(K8S, r)):
                err(kw, f"resource {r} does not exist")
    return ports, get(pod, "securityContext.runAsUser")


def check_dockerfile(ports, run_as):
    path = os.path.join(ROOT, "Dockerfile")
    text = open(path).read()
    joined = re.sub(r"\\\n", " ", text)
    lines = [l.strip() for l in joined.splitlines() if l.strip() and not l.strip().startswith("#")]
    froms = [l for l in lines if l.startswith("FROM ")]
    if len(froms) < 2:
        err("Dockerfile", "expected a multi-stage build (two FROM lines)")
    args = dict(re.findall(r"^ARG (\w+)=(\S+)", joined, re.M))
    for f in froms:
        image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), "?"), f.split()[1])
        if not re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-(devel|runtime)-ubuntu24\.04", image):
            err("Dockerfile", f"base image {image} is not a CUDA 13 devel/runtime ubuntu24.04 tag")
    if not any("devel" in f for f in froms) or "runtime" not in froms[-1]:
        err("Dockerfile", "build on the devel image, run on the runtime image")
    for script in sorted(set(re.findall(r"scripts/[\w./-]+", joined))):
        p = os.path.join(ROOT, script)
        if not os.path.isfile(p) or not os.access(p, os.X_OK):
            err("Dockerfile", f"{script} does not exist or is not executable")
    if "scripts/dev/install-deps.sh" not in joined:
        err("Dockerfile", "does not install through scripts/dev/install-deps.sh")
    exposed = {int(p) for l in lines if l.startswith("EXPOSE ") for p in l.split()[1:]}
    if ports and exposed != set(ports.values()):
        err("Dockerfile", f"EXPOSE {sorted(exposed)} != container ports {sorted(ports.values())}")
    users = [l.split()[1] for l in lines if l.startswith("USER ")]
    if not users or not users[-1].split(":")[0].isdigit() or users[-1].split(":")[0] == "0":
        err("Dockerfile", "the last USER must be a numeric non-root uid")
    elif run_as is not None and int(users[-1].split(":")[0]) != run_as:
        err("Dockerfile", f"USER {users[-1]} != the pod's runAsUser {run_as}")
    hc = [l for l in lines if l.startswith("HEALTHCHECK")]
    if not hc:
        err("Dockerfile", "no HEALTHCHECK")
    else:
        m = re.search(r'CMD \["([\w-]+)", "(\w+)"', hc[0])
        cli_src = open(os.path.join(ROOT, "client", "cli", "args.cc")).read()
        if not m or m.group(1) != "matserve-cli" or f'name == "{m.group(2)}"' not in cli_src:
            err("Dockerfile", "HEALTHCHECK must run a matserve-cli command that exists")
        elif m.group(2) != "health":
            err("Dockerfile", "HEALTHCHECK must ask the gRPC health service (matserve-cli health):"
                " other commands need a token when authentication is on")
        if "matserve-cli" not in joined.split("HEALTHCHECK")[0]:
            err("Dockerfile", "the image does not ship matserve-cli")
    ignore = open(os.path.join(ROOT, ".dockerignore")).read()
    if "build*/" not in ignore:
        err(".dockerignore", "build trees are not ignored")


def main():
    result = check_k8s()
    ports, run_as = result if result else ({}, None)
    check_dockerfile(ports, run_as)
    for e in errors:
        print("validate-deploy: ERROR", e)
    n = len([f for f in os.listdir(K8S) if f.endswith(".yaml")])
    print(f"validate-deploy: {n} manifests + Dockerfile, {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
