#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""deploy/validate.py passes the manifests as they are, and fails, naming the fault, on each broken
copy below (a copy of deploy/ in a temporary directory, one fault each)."""
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (what is broken, file, text replaced, replacement, what the error must say)
BREAKAGES = [
    ("a misspelt field", "base/daemonset.yaml", "hostPID: true", "hostPid: true", "hostPid"),
    ("a wrong type", "examples/node-service/deployment.yaml", "replicas: 2", "replicas: two", "replicas"),
    ("a missing required field", "base/daemonset.yaml", "      containers:\n        - name: scx-morpheus\n          image: localhost/morpheus/scx_morpheus:dev\n",
     "      containers:\n        - image: localhost/morpheus/scx_morpheus:dev\n", "'name' is a required property"),
    ("a capability without a reason", "base/daemonset.yaml", "              add:\n", "              add:\n                - NET_ADMIN\n",
     "capability NET_ADMIN has no comment"),
    ("a mount without a reason", "base/daemonset.yaml",
     "            - name: bpffs\n              mountPath: /sys/fs/bpf\n",
     "            - name: bpffs\n              mountPath: /sys/fs/bpf\n            - name: host-root\n              mountPath: /host\n",
     "volume mount host-root has no comment"),
    ("the agent in its own pid namespace", "base/daemonset.yaml", "hostPID: true", "hostPID: false", "hostPID is not true"),
    ("a service without the socket's group", "examples/node-service/deployment.yaml", "          - 2390\n", "          - 2391\n",
     "the socket's group 2390 (--socket-group) is not in its supplementalGroups"),
    ("a service pointed at another socket", "examples/node-service/deployment.yaml", "value: /run/morpheus/agent.sock", "value: /run/morpheus/other.sock",
     "MORPHEUS_SOCKET is '/run/morpheus/other.sock'"),
    ("a resource that does not exist", "base/kustomization.yaml", "  - daemonset.yaml", "  - daemonset.yml", "resource 'daemonset.yml' does not exist"),
    ("a patch of a path that does not exist", "overlays/enforced/kustomization.yaml", "/spec/template/spec/containers/0/args/1",
     "/spec/template/spec/containers/1/args/1", "does not exist"),
    ("a kustomize feature the validator does not render", "base/kustomization.yaml", "resources:", "commonLabels:\n  a: b\nresources:",
     "fields this validator does not render: ['commonLabels']"),
    ("broken YAML", "examples/namespace.yaml", "kind: Namespace", "kind: Namespace\n  bad: [", "not valid YAML"),
]


def run(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(root / "validate.py"), "--root", str(root)], capture_output=True, text=True)


def main() -> int:
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        pristine = Path(tmp) / "pristine"
        shutil.copytree(HERE, pristine, ignore=shutil.ignore_patterns("__pycache__"))
        proc = run(pristine)
        if proc.returncode != 0:
            print(f"FAIL: the manifests as they are do not validate:\n{proc.stdout}{proc.stderr}")
            failures += 1
        else:
            print(f"ok: the manifests as they are: {proc.stdout.strip().splitlines()[-1]}")
        for n, (what, rel, old, new, expected) in enumerate(BREAKAGES):
            root = Path(tmp) / f"broken{n}"
            shutil.copytree(pristine, root)
            path = root / rel
            text = path.read_text()
            if text.count(old) != 1:
                print(f"FAIL: {what}: {rel} does not contain {old!r} exactly once (the test is out of date)")
                failures += 1
                continue
            path.write_text(text.replace(old, new))
            proc = run(root)
            if proc.returncode == 0:
                print(f"FAIL: {what}: validate.py passed the broken manifests")
                failures += 1
            elif expected not in proc.stderr:
                print(f"FAIL: {what}: the error does not say {expected!r}:\n{proc.stderr}")
                failures += 1
            else:
                line = next(l for l in proc.stderr.splitlines() if expected in l)
                print(f"ok: {what} is refused: {line}")
    print(f"validate_test: {len(BREAKAGES) + 1 - failures} of {len(BREAKAGES) + 1} cases as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
