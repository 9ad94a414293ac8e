#!/usr/bin/env python3
"""Writes crates/maintd-sim/src/protobuf/schema.txt: the protobuf layout of the built-in
kinds the simulator reads from `application/vnd.kubernetes.protobuf` bodies.

Why a generated table: the field numbers live in the upstream .proto files,
and the only Rust packaging of them is k8s-pb (prost types, no reflection,
no serde), so the simulator cannot learn a message's layout at run time from
a dependency. This script reads the two crates' sources from the cargo
registry instead:

- k8s-pb: message names, field numbers and wire types (`#[prost(...)]`),
  and which messages are kinds (`impl crate::Resource`);
- k8s-openapi: the JSON name of each field (k8s-pb's snake_case names lose
  the case of acronyms: `cluster_ip` is `clusterIP`), whether the field is
  required, and which fields Go embeds inline (`json:",inline"`): a message
  field that the JSON form does not have, such as
  ConfigMapKeySelector.localObjectReference.

Usage (both crates must be in the registry: `cargo info k8s-pb@0.9.0`
fetches it; k8s-openapi is a dependency):

    scripts/gen-sim-proto-schema.py > crates/maintd-sim/src/protobuf/schema.txt
"""

import glob
import os
import re
import sys

K8S_PB = "0.9.0"
K8S_OPENAPI = "0.29.0"
# The Kubernetes minor k8s-pb 0.9.0 was generated from (1.35: it has
# PodSpec.workloadRef); k8s-openapi's matching module gives the JSON names.
OPENAPI_MODULE = "v1_35"
# The module for messages 1.35 does not have (those of PATCH_1_37).
OPENAPI_MODULE_NEW = "v1_37"

# No k8s-pb release follows Kubernetes 1.37 (0.9.0 is the latest). What 1.37
# changed in the messages the simulator reads, as k8s.io/api v0.37.2's
# core/v1/generated.proto numbers it: PodSpec lost workloadRef (42) and
# gained schedulingGroup (43) and evictionResponders (44), the EvictionRequest
# API's field. Fields as parse_k8s_pb gives them: (tag, rust name, label, type).
PATCH_1_37 = {
    "k8s.io.api.core.v1.PodSpec": {
        "drop": [42],
        "add": [
            (43, "scheduling_group", "one", "k8s.io.api.core.v1.PodSchedulingGroup"),
            (44, "eviction_responders", "list", "k8s.io.api.core.v1.EvictionResponder"),
        ],
    },
}
NEW_MESSAGES_1_37 = {
    "k8s.io.api.core.v1.PodSchedulingGroup": [(1, "pod_group_name", "one", "string")],
    "k8s.io.api.core.v1.EvictionResponder": [
        (1, "name", "one", "string"),
        (2, "priority", "one", "int32"),
    ],
}

# The API groups the simulator serves as built-ins (crates/maintd-sim/src/resources.rs),
# and the bodies of its subresources and deletes: Eviction, Scale and
# DeleteOptions. Only their kinds and the messages reachable from them are
# written.
ROOT_PACKAGES = [
    "api/core/v1",
    "api/apps/v1",
    "api/policy/v1",
    "api/coordination/v1",
    "api/events/v1",
    "api/scheduling/v1",
    "api/rbac/v1",
]
EXTRA_KINDS = [
    ("autoscaling/v1", "Scale", "k8s.io.api.autoscaling.v1.Scale"),
    ("policy/v1", "Eviction", "k8s.io.api.policy.v1.Eviction"),
    ("meta.k8s.io/v1", "DeleteOptions", "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions"),
]

SCALARS = {"string", "bool", "int32", "int64", "double", "bytes"}


def registry_src(name, version):
    hits = glob.glob(os.path.expanduser(f"~/.cargo/registry/src/*/{name}-{version}"))
    if not hits:
        sys.exit(f"{name} {version} is not in the cargo registry: run `cargo info {name}@{version}`")
    return hits[0]


def norm(name):
    """A field name with case and underscores dropped: k8s-pb's snake_case,
    k8s-openapi's snake_case and the JSON camelCase all agree on it."""
    return name.replace("r#", "").replace("_", "").lower()


def parse_k8s_pb(root):
    """{full message name: [(tag, rust name, kind, label, value type)]}, kinds."""
    messages, kinds = {}, []
    src = os.path.join(root, "src")
    for path in glob.glob(os.path.join(src, "**", "mod.rs"), recursive=True):
        module = os.path.relpath(os.path.dirname(path), src).split(os.sep)
        if module == ["."]:
            continue
        package = "k8s.io." + ".".join(module).replace("_", "-")
        text = "\n".join(
            line for line in open(path, encoding="utf-8").read().splitlines()
            if not line.strip().startswith("///")
        )
        for m in re.finditer(r"pub struct (\w+) \{(.*?)\n\}", text, re.S):
            fields = []
            for chunk in m.group(2).split("#[prost(")[1:]:
                attr, _, decl = chunk.partition(")]")
                fm = re.match(r"\s*pub (?:r#)?(\w+):\s*(.*),\s*$", decl, re.S)
                if not fm:
                    sys.exit(f"cannot read a field of {package}.{m.group(1)}: {decl!r}")
                rust, ty = fm.group(1), re.sub(r"\s+", "", fm.group(2)).replace(",>", ">")
                tag = int(re.search(r'tag = "(\d+)"', attr).group(1))
                fields.append((tag, rust) + field_type(attr, ty, module))
            messages[f"{package}.{m.group(1)}"] = fields
        for k in re.finditer(
            r'impl crate::Resource for (\w+) \{\s*const API_VERSION: &\'static str = "([^"]+)";'
            r'.*?const KIND: &\'static str = "(\w+)";',
            text,
            re.S,
        ):
            kinds.append((k.group(2), k.group(3), f"{package}.{k.group(1)}"))
    return messages, kinds


def field_type(attr, ty, module):
    """(label, type): label is one, list or map:<key>; type a scalar or a
    full message name."""
    if attr.startswith("btree_map"):
        key, value = re.match(r'btree_map = "(\w+), (\w+)"', attr).groups()
        if value == "message":
            inner = ty.split(",", 1)[1].rsplit(">", 1)[0]
            return f"map:{key}", resolve(inner, module)
        return f"map:{key}", value
    kind = re.match(r"(\w+)", attr).group(1)
    label = "list" if ", repeated" in attr else "one"
    if kind in SCALARS:
        return label, kind
    if kind != "message":
        sys.exit(f"unknown prost field kind {attr!r}")
    inner = re.sub(r"^(::core::option::Option|::prost::alloc::vec::Vec)<(.*)>$", r"\2", ty)
    return label, resolve(inner, module)


def resolve(path, module):
    parts = path.split("::")
    here = list(module)
    while parts and parts[0] == "super":
        here.pop()
        parts.pop(0)
    if parts and parts[0] == "crate":
        here, parts = [], parts[1:]
    full = here + parts
    return "k8s.io." + ".".join(full[:-1]).replace("_", "-") + "." + full[-1]


def parse_k8s_openapi(root, module=OPENAPI_MODULE):
    """{definition name: {normalized field name: (json name, required)}}"""
    out = {}
    base = os.path.join(root, "src", module)
    for path in glob.glob(os.path.join(base, "**", "*.rs"), recursive=True):
        text = open(path, encoding="utf-8").read()
        d = re.match(r"// Generated from definition (\S+)", text)
        s = re.search(r"pub struct \w+ \{(.*?)\n\}", text, re.S)
        if not d or not s:
            continue
        rust_types = {
            f.group(1): f.group(2)
            for f in re.finditer(r"^\s*pub (\w+): (.*),$", s.group(1), re.M)
        }
        fields = {}
        for j in re.finditer(r'"([^"]+)" => Field::Key_(\w+),', text):
            json, rust = j.groups()
            required = not rust_types.get(rust, "Option<").startswith("Option<")
            fields[norm(json)] = (json, required)
        # By lower case: k8s-pb renames acronyms (HTTPGetAction is
        # HttpGetAction).
        out[d.group(1).lower()] = fields
    return out


def definition(message):
    """The OpenAPI definition name of a message, in lower case."""
    return ("io.k8s." + message.removeprefix("k8s.io.")).lower()


def lower_camel(rust):
    head, *rest = rust.split("_")
    return head + "".join(p.capitalize() for p in rest)


def main():
    messages, kinds = parse_k8s_pb(registry_src("k8s-pb", K8S_PB))
    openapi_root = registry_src("k8s-openapi", K8S_OPENAPI)
    openapi = parse_k8s_openapi(openapi_root)
    messages.update(NEW_MESSAGES_1_37)
    newer = parse_k8s_openapi(openapi_root, OPENAPI_MODULE_NEW)
    for name, change in PATCH_1_37.items():
        kept = [f for f in messages[name] if f[0] not in change["drop"]]
        messages[name] = kept + change["add"]
    for name in list(PATCH_1_37) + list(NEW_MESSAGES_1_37):
        # The JSON names of what 1.35 did not have; the rest keeps 1.35's.
        old = openapi.get(definition(name), {})
        for key, field in newer.get(definition(name), {}).items():
            old.setdefault(key, field)
        openapi[definition(name)] = old

    kinds = [k for k in kinds if any(k[2].startswith("k8s.io." + p.replace("/", ".") + ".") for p in ROOT_PACKAGES)]
    kinds += EXTRA_KINDS
    todo, seen = sorted(m for _, _, m in kinds), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in messages:
            sys.exit(f"unknown message {name}")
        seen.add(name)
        todo.extend(t for _, _, _, t in messages[name] if t not in SCALARS)

    print("# The protobuf layout of the simulator's built-in kinds.")
    print(f"# Generated by scripts/gen-sim-proto-schema.py from k8s-pb {K8S_PB} (field numbers,")
    print(f"# wire types) and k8s-openapi {K8S_OPENAPI} {OPENAPI_MODULE} (JSON names, required), with")
    print(f"# Kubernetes 1.37's PodSpec changes (PATCH_1_37 in the script; {OPENAPI_MODULE_NEW} names). Do not edit.")
    print("#")
    print("# kind <apiVersion> <Kind> <message>")
    print("# message <full name>, then one line per field:")
    print("#   <number> <JSON name> <type> [required] [inline]")
    print("# where <type> is a scalar (string bool int32 int64 double bytes) or a")
    print("# message name, prefixed by [] for a repeated field or map[<key>] for a map;")
    print("# a message name without dots is in the message's own package.")
    for api_version, kind, msg in sorted(kinds):
        print(f"kind {api_version} {kind} {msg}")
    # A message embedded inline (VolumeSource in Volume) has no definition of
    # its own: its fields are named in the definition it is embedded in.
    names = {n: openapi.get(definition(n)) for n in seen}
    for name in sorted(seen):
        for tag, rust, label, ty in messages[name]:
            parent = names[name]
            if parent is not None and ty not in SCALARS and label == "one" and norm(rust) not in parent:
                if names.get(ty) is None:
                    names[ty] = parent
    unmatched, inline = [], []
    for name in sorted(seen):
        package = name.rsplit(".", 1)[0]
        json_fields = names[name]
        print(f"message {name}")
        for tag, rust, label, ty in sorted(messages[name]):
            flags = []
            if json_fields is not None and norm(rust) in json_fields:
                json, required = json_fields[norm(rust)]
                if required:
                    flags.append("required")
            elif json_fields is not None and ty not in SCALARS and label == "one":
                json = lower_camel(rust)
                flags.append("inline")
                inline.append(f"{name}.{json}")
            else:
                json = lower_camel(rust)
                if json_fields is not None:
                    unmatched.append(f"{name}.{json}")
            short = ty.removeprefix(package + ".") if ty.startswith(package + ".") and "." not in ty.removeprefix(package + ".") else ty
            prefix = {"one": "", "list": "[]"}.get(label, f"map[{label[4:]}]")
            print(f"  {tag} {json} {prefix}{short}" + "".join(" " + f for f in flags))
    print(f"inline fields: {len(inline)}: {' '.join(inline)}", file=sys.stderr)
    print(f"fields not in k8s-openapi {OPENAPI_MODULE}: {' '.join(unmatched) or 'none'}", file=sys.stderr)
    no_def = [n for n in sorted(seen) if names[n] is None]
    print(f"messages without an OpenAPI definition: {' '.join(no_def)}", file=sys.stderr)


if __name__ == "__main__":
    main()
