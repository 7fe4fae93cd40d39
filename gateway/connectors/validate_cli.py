"""`dex-gateway connectors validate PATH...`: check manifests and their reviewer blocks.

For every operation without an agent block it prints what a reviewer must add to expose it,
so a published manifest (which never carries one) comes back with a to-do list, not an error.
Exit 1 when any file is refused.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from .errors import ConnectorError
from .manifest import MANIFEST_FILENAMES, Manifest, Operation, load_manifest
from .registry import _sidecar_binding, find_manifests


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="manifest files or connector directories")


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    failed = 0
    checked = 0
    for raw in args.paths:
        path = Path(raw)
        try:
            targets = _targets(path)
        except ConnectorError as exc:
            print(f"ERROR {exc}", file=out)
            failed += 1
            continue
        for manifest_path, sidecar_dir, stem in targets:
            checked += 1
            try:
                manifest = load_manifest(manifest_path)
                binding = _sidecar_binding(sidecar_dir, stem)
            except ConnectorError as exc:
                print(f"ERROR {exc}", file=out)
                failed += 1
                continue
            _report(manifest, binding is not None, out)
    print(f"{checked - failed} valid, {failed} refused", file=out)
    return 1 if failed or checked == 0 else 0


def _targets(path: Path) -> list[tuple[Path, Path, str | None]]:
    if path.is_file():
        stem = None if path.name in MANIFEST_FILENAMES else path.name.rsplit(".", 1)[0]
        return [(path, path.parent, stem)]
    if path.is_dir():
        for name in MANIFEST_FILENAMES:
            if (path / name).is_file():
                return [(path / name, path, None)]
        found = find_manifests(path)
        if not found:
            raise ConnectorError(f"{path}: no connector manifests found")
        return found
    raise ConnectorError(f"{path}: no such file or directory")


def _report(manifest: Manifest, has_binding: bool, out: TextIO) -> None:
    exposed = manifest.exposed_operations
    print(f"OK    {manifest.file}: connector {manifest.connector_id}, {len(manifest.operations)} operations, "
          f"{len(exposed) or 'none'} exposed", file=out)
    for op in exposed:
        approval = "  approval: recommended" if op.requires_approval else ""
        print(f"      {manifest.tool_name(op)}  ({op.name}, {op.effect.value}, {op.max_attempts} attempt"
              f"{'s' if op.max_attempts > 1 else ''}){approval}", file=out)
    if exposed and not has_binding:
        print("      note: exposed operations need a binding: binding.yaml beside the manifest, the gateway "
              "config, or the admin API's binding field", file=out)
    for op in manifest.operations:
        if op.agent is None:
            print(_todo(op), file=out)
        elif not op.exposed:
            print(f"      {op.name}: not exposed (agent.exposed is not true)", file=out)


def _todo(op: Operation) -> str:
    optional = [b for b in op.branches if b in op.optional_branches]
    success = ", ".join(sorted(op.success_branches)) or "(none)"
    lines = [f"      {op.name} ({op.kind}): no agent block, so it is not exposed. To expose it, a reviewer adds:"]
    lines.append("          agent:")
    lines.append("            exposed: true")
    lines.append("            approval: recommended     # optional: a human approves each call")
    if op.is_mutation:
        lines.append("            retry: safe               # only if sending it twice with the same callId is harmless")
        verbs = "rejected or unknown (unlisted: unknown)"
    else:
        verbs = "rejected (unlisted: failed)"
    if optional:
        example = next((b for b in optional if b not in ("defect", "uncertain")), optional[0])
        lines.append(f"            branches: {{{example}: rejected}}   # optional branches: {', '.join(optional)}; each {verbs}")
    lines.append("          inputSchema:               # JSON Schema 2020-12 of the operation's input; type: object")
    lines.append("            type: object")
    lines.append("            properties: {...}")
    lines.append("            required: [...]")
    lines.append("            additionalProperties: false")
    note = f"        success branch: {success}"
    if not op.optional_flags:
        note += (" (this manifest marks no branch optional: true, so the first branch is the success branch "
                 "and the others count as optional)")
    lines.append(note)
    return "\n".join(lines)
