"""The shipped DaemonSet (`rdmacli watch daemonset`): valid against Kubernetes' own schemas,
offline (kubernetes-validate, strict: no field Kubernetes does not know), and what it promises:
host network, RDMA devices from a device plugin, IPC_LOCK alone and not privileged, the key and
web config as Secrets mounted as files the agent opens (subPath: no symlink), a readiness probe,
and every argument one `watch run` takes."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from rdmacli.cli import cli
from rdmacli.cli.watch import run as watch_run
from rdmacli.watch.install import daemonset_text

K8S = "1.30.0"  # a release every cluster of today's fleets runs or has passed


@pytest.fixture(scope="module")
def manifest() -> dict:
    return yaml.safe_load(daemonset_text())


def test_the_daemonset_is_valid_kubernetes_strictly(manifest):
    # a dev dependency from PyPI (Debian 12 has none): the package's build runs the rest without it
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(manifest, K8S, strict=True)
    broken = yaml.safe_load(daemonset_text().replace("hostNetwork: true", "hostNetwrk: true"))
    with pytest.raises(kubernetes_validate.ValidationError):  # the validator does catch a typo
        kubernetes_validate.validate(broken, K8S, strict=True)
    r = CliRunner().invoke(cli, ["watch", "daemonset"])
    assert r.exit_code == 0 and r.stdout == daemonset_text()


def test_the_daemonset_runs_an_unprivileged_agent_with_the_fabrics_devices(manifest):
    pod = manifest["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    (c,) = pod["containers"]
    sec = c["securityContext"]
    assert sec["privileged"] is False and sec["allowPrivilegeEscalation"] is False
    assert sec["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert any(k.startswith("rdma/") for k in c["resources"]["limits"])  # the device plugin's devices
    assert c["readinessProbe"]["exec"]["command"] == ["rdmacli", "watch", "show"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert {volumes[n]["secret"]["secretName"] for n in ("key", "web")} == {
        "rdmacli-watch-key",
        "rdmacli-watch-web",
    }
    assert all(volumes[n]["secret"]["defaultMode"] == 0o400 for n in ("key", "web"))
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert all(mounts[n].get("subPath") for n in ("map", "key", "web"))  # files, not symlinks
    assert volumes["state"]["hostPath"]["path"] == "/run/rdmacli"  # where `rdmacli check` reads it
    args = c["args"]
    assert args[:2] == ["watch", "run"]
    known = {o for p in watch_run.params for o in p.opts}
    assert {a for a in args[2:] if a.startswith("--")} <= known, args
    for opt, path in (("--map", "/etc/rdmacli/watch.map"), ("--key-file", "/etc/rdmacli/watch.key"),
                      ("--web-config-file", "/etc/rdmacli/web.yml")):  # fmt: skip
        assert args[args.index(opt) + 1] == path and path in {m["mountPath"] for m in mounts.values()}
