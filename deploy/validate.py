#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Validates deploy/'s Kubernetes manifests offline; exits 1 naming every problem, 0 when all pass.

    python3 deploy/validate.py [--root DIR] [--kubernetes-version V]

For each kustomization (KUSTOMIZATIONS below) it renders the objects the way `kubectl kustomize`
does for the subset deploy/ uses (resources: files and directories; namespace; images: name, newName,
newTag; patches: inline JSON 6902 operations with a kind/name target; anything else is refused, so a feature this renderer
does not know cannot pass unchecked), then:

- checks every object against the Kubernetes OpenAPI schemas of kubernetes-validate (PyPI), strict:
  an unknown field, a wrong type or a missing required field fails;
- checks deploy/'s own rules: every capability the agent adds and every volume it mounts is justified
  by a comment above it in the source; the agent runs in the host's pid namespace and no example pod
  does; each example pod that mounts the socket directory has the agent's --socket-group among its
  supplementalGroups, mounts the same host directory and names the agent's --socket in MORPHEUS_SOCKET;
- when `kubectl` is on PATH, renders each kustomization with `kubectl kustomize` too and requires the
  same objects (so this renderer cannot drift from kustomize's meaning).
"""
import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

KUSTOMIZATIONS = ["base", "overlays/enforced", "examples"]
# The Kubernetes release the manifests are written for (kubernetes-validate's schemas).
KUBERNETES_VERSION = "1.30.0"
AGENT = ("DaemonSet", "scx-morpheus")
KNOWN_KEYS = {"apiVersion", "kind", "namespace", "resources", "patches", "images"}


class Problem(Exception):
    pass


def load_docs(path: Path) -> list[dict]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as e:
        raise Problem(f"{path}: not valid YAML: {e}")
    for d in docs:
        if not isinstance(d, dict) or "kind" not in d:
            raise Problem(f"{path}: a document is not a Kubernetes object (no kind)")
    return docs


def pointer(path: str) -> list:
    if not path.startswith("/"):
        raise Problem(f"JSON patch path {path!r} does not start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def apply_op(obj, op: dict, where: str):
    """One JSON 6902 operation (add, replace, remove) on obj, in place."""
    kind = op.get("op")
    if kind not in ("add", "replace", "remove"):
        raise Problem(f"{where}: JSON patch op {kind!r} is not supported here (add, replace, remove)")
    parts = pointer(op.get("path", ""))
    parent = obj
    for p in parts[:-1]:
        try:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        except (KeyError, IndexError, ValueError):
            raise Problem(f"{where}: JSON patch path {op['path']} does not exist in the target")
    last = parts[-1]
    if isinstance(parent, list):
        if kind == "add" and last == "-":
            parent.append(copy.deepcopy(op["value"]))
            return
        try:
            i = int(last)
            if not 0 <= i < len(parent) + (kind == "add"):
                raise IndexError
        except (ValueError, IndexError):
            raise Problem(f"{where}: JSON patch path {op['path']}: no such list index")
        if kind == "add":
            parent.insert(i, copy.deepcopy(op["value"]))
        elif kind == "replace":
            parent[i] = copy.deepcopy(op["value"])
        else:
            del parent[i]
    elif isinstance(parent, dict):
        if kind != "add" and last not in parent:
            raise Problem(f"{where}: JSON patch path {op['path']} does not exist in the target")
        if kind == "remove":
            del parent[last]
        else:
            parent[last] = copy.deepcopy(op["value"])
    else:
        raise Problem(f"{where}: JSON patch path {op['path']} goes through a scalar")


def render(directory: Path, seen=()) -> list[dict]:
    """The objects of the kustomization in directory (the subset of kustomize's meaning above)."""
    directory = directory.resolve()
    if directory in seen:
        raise Problem(f"{directory}: kustomization cycle")
    kfile = directory / "kustomization.yaml"
    if not kfile.is_file():
        raise Problem(f"{directory}: no kustomization.yaml")
    k = yaml.safe_load(kfile.read_text()) or {}
    unknown = set(k) - KNOWN_KEYS
    if unknown:
        raise Problem(f"{kfile}: fields this validator does not render: {sorted(unknown)}")
    if k.get("kind") != "Kustomization":
        raise Problem(f"{kfile}: kind is {k.get('kind')!r}, not Kustomization")
    objects = []
    for entry in k.get("resources", []):
        path = directory / entry
        if path.is_dir():
            objects += render(path, seen + (directory,))
        elif path.is_file():
            objects += load_docs(path)
        else:
            raise Problem(f"{kfile}: resource {entry!r} does not exist")
    for n, patch in enumerate(k.get("patches", [])):
        where = f"{kfile}: patches[{n}]"
        target = patch.get("target", {})
        if set(patch) != {"target", "patch"} or set(target) - {"kind", "name"}:
            raise Problem(f"{where}: only an inline JSON 6902 'patch' with a kind/name 'target' is supported")
        ops = yaml.safe_load(patch["patch"])
        if not isinstance(ops, list):
            raise Problem(f"{where}: the patch is not a list of JSON 6902 operations")
        hits = [o for o in objects if all(o.get("kind") == target.get("kind") if key == "kind" else
                                            o.get("metadata", {}).get("name") == target.get("name") for key in target)]
        if not hits:
            raise Problem(f"{where}: no object matches target {target}")
        for obj in hits:
            for op in ops:
                apply_op(obj, op, where)
    for n, image in enumerate(k.get("images", [])):
        if not isinstance(image, dict) or "name" not in image or set(image) - {"name", "newName", "newTag"}:
            raise Problem(f"{kfile}: images[{n}]: only name, newName and newTag are supported")
        for obj in objects:
            for c in obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
                name, _, tag = c.get("image", "").partition(":")
                if name == image["name"]:
                    c["image"] = image.get("newName", name) + ":" + str(image.get("newTag", tag))
    if "namespace" in k:
        for obj in objects:
            if obj["kind"] != "Namespace":
                obj.setdefault("metadata", {})["namespace"] = k["namespace"]
    return objects


def schema_problems(objects: list[dict], version: str, name: str) -> list[str]:
    import kubernetes_validate
    problems = []
    for obj in objects:
        label = f"{name}: {obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            at = "/".join(str(p) for p in e.path) or "(top)"
            problems.append(f"{label}: schema ({version}): at {at}: {e.message}")
        except kubernetes_validate.utils.SchemaNotFoundError as e:
            problems.append(f"{label}: no schema for {e.kind} {e.api_version} in Kubernetes {version}")
    return problems


def justified(lines: list[str], index: int) -> bool:
    """Whether the item on lines[index] has a comment above it: the nearest line above that is not a
    sibling item of the same list, nor a JSON patch op's own line, is a comment."""
    i = index - 1
    indent = len(lines[index]) - len(lines[index].lstrip())
    while i >= 0:
        text = lines[i].strip()
        if text.startswith("#"):
            return True
        own_indent = len(lines[i]) - len(lines[i].lstrip())
        sibling = text.startswith("- ") and own_indent == indent and ":" not in text
        patch_line = text.startswith(("- op:", "path:", "value:"))
        if not (sibling or patch_line):
            return False
        i -= 1
    return False


def justification_problems(root: Path, agent: dict) -> list[str]:
    container = agent["spec"]["template"]["spec"]["containers"][0]
    caps = container.get("securityContext", {}).get("capabilities", {}).get("add", [])
    mounts = [m["name"] for m in container.get("volumeMounts", [])]
    sources = [p for p in root.rglob("*.yaml")]
    problems = []
    for what, names, forms in (("capability", caps, ("- {}", "value: {}")), ("volume mount", mounts, ("- name: {}", "name: {}"))):
        for name in names:
            found = False
            for src in sources:
                lines = src.read_text().splitlines()
                for i, line in enumerate(lines):
                    if line.strip() in [f.format(name) for f in forms] and (what != "volume mount" or "mountPath" in "".join(lines[i:i + 2])):
                        found = found or justified(lines, i)
            if not found:
                problems.append(f"agent: {what} {name} has no comment above it saying why it is needed")
    return problems


def arg(container: dict, flag: str):
    for a in container.get("args", []):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def consistency_problems(rendered: dict[str, list[dict]]) -> list[str]:
    problems = []
    agents = [o for objs in rendered.values() for o in objs if (o["kind"], o["metadata"]["name"]) == AGENT]
    if not agents:
        return ["no agent DaemonSet scx-morpheus rendered"]
    agent = agents[0]
    spec = agent["spec"]["template"]["spec"]
    c = spec["containers"][0]
    if spec.get("hostPID") is not True:
        problems.append("agent: hostPID is not true (it must see the processes that register, in other pods)")
    group, socket = arg(c, "--socket-group"), arg(c, "--socket")
    if group is None or socket is None:
        problems.append("agent: --socket and --socket-group must be given as --flag=value")
        return problems
    socket_dir = os.path.dirname(socket)
    host_dirs = {m["mountPath"]: v["hostPath"]["path"] for m in c["volumeMounts"] for v in spec["volumes"]
                 if v["name"] == m["name"] and "hostPath" in v}
    if socket_dir not in host_dirs:
        problems.append(f"agent: the socket directory {socket_dir} is not a hostPath mount")
        return problems
    for name, objs in rendered.items():
        for o in objs:
            if o["kind"] not in ("Deployment", "StatefulSet", "DaemonSet", "Job") or (o["kind"], o["metadata"]["name"]) == AGENT:
                continue
            pspec = o["spec"]["template"]["spec"]
            label = f"{name}: {o['kind']}/{o['metadata']['name']}"
            if pspec.get("hostPID"):
                problems.append(f"{label}: hostPID is set; a service needs its own pid namespace, never the host's")
            vols = {v["name"]: v.get("hostPath", {}).get("path") for v in pspec.get("volumes", [])}
            for ct in pspec["containers"]:
                for m in ct.get("volumeMounts", []):
                    if vols.get(m["name"]) != host_dirs[socket_dir]:
                        continue
                    groups = [str(g) for g in pspec.get("securityContext", {}).get("supplementalGroups", [])]
                    if group not in groups:
                        problems.append(f"{label}: mounts the agent's socket directory but the socket's group {group} "
                                        f"(--socket-group) is not in its supplementalGroups {groups}")
                    env = {e["name"]: e.get("value") for e in ct.get("env", [])}
                    expected = os.path.join(m["mountPath"], os.path.basename(socket))
                    if env.get("MORPHEUS_SOCKET", "/run/morpheus/agent.sock") != expected:
                        problems.append(f"{label}: MORPHEUS_SOCKET is {env.get('MORPHEUS_SOCKET')!r}, "
                                        f"but the agent's socket is {expected} in this container")
    return problems


def canonical(objects: list[dict]) -> list[str]:
    return sorted(json.dumps(o, sort_keys=True) for o in objects)


def kubectl_problems(root: Path, rendered: dict[str, list[dict]]) -> list[str]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("validate: kubectl not on PATH: the cross-check with `kubectl kustomize` is left out")
        return []
    problems = []
    for name, objs in rendered.items():
        proc = subprocess.run([kubectl, "kustomize", str(root / name)], capture_output=True, text=True)
        if proc.returncode != 0:
            problems.append(f"{name}: kubectl kustomize failed: {proc.stderr.strip()}")
            continue
        theirs = [d for d in yaml.safe_load_all(proc.stdout) if d]
        if canonical(theirs) != canonical(objs):
            problems.append(f"{name}: this validator's rendering differs from kubectl kustomize's")
    if not problems:
        print(f"validate: kubectl kustomize renders the same objects ({kubectl})")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--kubernetes-version", default=KUBERNETES_VERSION)
    opts = parser.parse_args(argv)
    problems, rendered = [], {}
    for name in KUSTOMIZATIONS:
        try:
            rendered[name] = render(opts.root / name)
        except Problem as e:
            problems.append(f"{name}: {e}")
    for name, objs in rendered.items():
        problems += schema_problems(objs, opts.kubernetes_version, name)
    problems += consistency_problems(rendered)
    agents = [o for objs in rendered.values() for o in objs if (o["kind"], o["metadata"]["name"]) == AGENT]
    for agent in agents:
        problems += justification_problems(opts.root, agent)
    if not problems:
        problems += kubectl_problems(opts.root, rendered)
    for p in dict.fromkeys(problems):
        print(f"validate: error: {p}", file=sys.stderr)
    if problems:
        return 1
    count = sum(len(o) for o in rendered.values())
    print(f"validate: {count} objects in {len(rendered)} kustomizations valid against Kubernetes {opts.kubernetes_version} (strict)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
