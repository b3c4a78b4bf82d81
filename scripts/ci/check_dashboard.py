#!/usr/bin/env python3
"""Static checks of the monitoring deploy files, and the dashboard's queries for other tools.

Checks: the dashboard JSON (unique panel ids, a datasource and at least one PromQL expression per
panel, every $variable defined or a Grafana built-in, the variables device and variant present,
every matserve_* metric it names documented in docs/metrics.md); the Grafana provisioning YAML
(the dashboards path is where docker-compose mounts them); deploy/docker-compose.yml (parses,
services matserve with a GPU reservation, prometheus and grafana, every mounted file exists);
deploy/prometheus/prometheus.yml (parses, scrapes a matserve job). promtool and a running
Prometheus are the end-to-end test's job (tests/e2e/test_metrics.py), which imports this file.

usage: scripts/ci/check_dashboard.py            exit 1 and a list of problems if any
       scripts/ci/check_dashboard.py --exprs    print each panel's expressions (variables substituted)
Needs PyYAML (Debian: python3-yaml).
"""
import json
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy/grafana/dashboards/matserve.json"
PROMETHEUS = ROOT / "deploy/prometheus/prometheus.yml"
COMPOSE = ROOT / "deploy/docker-compose.yml"
PROVISIONING = ROOT / "deploy/grafana/provisioning"
DOCS = ROOT / "docs/metrics.md"

GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s",
                    "__range_ms", "__from", "__to", "__all", "__name", "__dashboard", "__org",
                    "__user", "__timeFilter"}
VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


def load_dashboard(path=DASHBOARD):
    return json.loads(pathlib.Path(path).read_text())


def panels(dashboard):
    """Every panel, nested row panels included."""
    for p in dashboard.get("panels", []):
        yield p
        yield from p.get("panels", [])


def substitute(expr, values):
    """Replaces $var, ${var} and ${var:fmt} by values[var]."""
    def repl(m):
        name = m.group(1) or m.group(2)
        if name not in values:
            raise KeyError(f"no value for ${name} in {expr!r}")
        return values[name]
    return VARIABLE.sub(repl, expr)


def queries(dashboard, values):
    """(panel title, refId, expression with variables substituted) for every panel target."""
    out = []
    for p in panels(dashboard):
        for t in p.get("targets", []):
            if t.get("expr"):
                out.append((p["title"], t.get("refId", "?"), substitute(t["expr"], values)))
    return out


def metric_names(expr):
    return set(re.findall(r"\b(matserve_[a-z0-9_]+)", expr))


def check_dashboard(problems):
    d = load_dashboard()
    variables = {v["name"] for v in d.get("templating", {}).get("list", [])}
    for needed in ("instance", "device", "variant", "datasource"):
        if needed not in variables:
            problems.append(f"dashboard: no variable ${needed}")
    ids = [p.get("id") for p in panels(d)]
    if len(ids) != len(set(ids)):
        problems.append("dashboard: duplicate panel ids")
    docs = DOCS.read_text() if DOCS.exists() else ""
    for p in panels(d):
        for t in p.get("targets", []):
            for m in re.finditer(r"\b(matserve_[a-z0-9_]+)(\{[^}]*\})?", t.get("expr") or ""):
                if '$instance' not in (m.group(2) or ""):
                    problems.append(f"panel {p.get('title')!r}: {m.group(1)} is not filtered "
                                    "by $instance")
        if p.get("type") == "row":
            continue
        title = p.get("title", "?")
        if "gridPos" not in p:
            problems.append(f"panel {title!r}: no gridPos")
        if not p.get("datasource"):
            problems.append(f"panel {title!r}: no datasource")
        exprs = [t.get("expr", "") for t in p.get("targets", [])]
        if not exprs or not all(exprs):
            problems.append(f"panel {title!r}: a target without a PromQL expression")
        for e in exprs:
            for m in VARIABLE.finditer(e):
                name = m.group(1) or m.group(2)
                if name not in variables and name not in GRAFANA_BUILTINS:
                    problems.append(f"panel {title!r}: undefined variable ${name}")
            for name in metric_names(e):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                if base not in docs and name not in docs:
                    problems.append(f"panel {title!r}: {name} is not in docs/metrics.md")
    for v in d.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            if not re.fullmatch(r"label_values\(\w+, *\w+\)", q or ""):
                problems.append(f"variable {v['name']}: unexpected query {q!r}")


def check_yaml(problems):
    prom = yaml.safe_load(PROMETHEUS.read_text())
    jobs = [j.get("job_name") for j in prom.get("scrape_configs", [])]
    if "matserve" not in jobs:
        problems.append("prometheus.yml: no scrape job named matserve")
    for rules in prom.get("rule_files", []):
        if not (PROMETHEUS.parent / rules).is_file():
            problems.append(f"prometheus.yml: rule file {rules} is missing")

    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose.get("services", {})
    for name in ("matserve", "prometheus", "grafana"):
        if name not in services:
            problems.append(f"docker-compose.yml: no service {name}")
    devices = (services.get("matserve", {}).get("deploy", {}).get("resources", {})
               .get("reservations", {}).get("devices", []))
    if not any("gpu" in d.get("capabilities", []) for d in devices):
        problems.append("docker-compose.yml: matserve reserves no GPU")
    for name, svc in services.items():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("."):
                if not (COMPOSE.parent / src).exists():
                    problems.append(f"docker-compose.yml: {name} mounts missing {src}")
    grafana_mounts = {v.split(":")[1]: v.split(":")[0]
                      for v in services.get("grafana", {}).get("volumes", [])}

    for f in sorted(PROVISIONING.rglob("*.yml")):
        doc = yaml.safe_load(f.read_text())
        for prov in doc.get("providers", []):
            path = prov.get("options", {}).get("path")
            if path not in grafana_mounts:
                problems.append(f"{f.name}: dashboards path {path} is not mounted in grafana")
            elif not list((COMPOSE.parent / grafana_mounts[path]).glob("*.json")):
                problems.append(f"{f.name}: no dashboard JSON under {grafana_mounts[path]}")
        for ds in doc.get("datasources", []):
            if ds.get("type") != "prometheus":
                problems.append(f"{f.name}: datasource {ds.get('name')} is not prometheus")


def main(argv):
    if "--exprs" in argv:
        values = {"device": ".*", "variant": ".*", "__rate_interval": "1m", "__interval": "15s",
                  "__range": "1h", "datasource": "prometheus"}
        for title, ref, expr in queries(load_dashboard(), values):
            print(f"{title} [{ref}]: {expr}")
        return 0
    problems = []
    check_dashboard(problems)
    check_yaml(problems)
    for p in problems:
        print("check-dashboard:", p)
    if not problems:
        n = sum(1 for _ in panels(load_dashboard()))
        print(f"check-dashboard: ok ({n} panels, compose, provisioning, prometheus.yml)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
