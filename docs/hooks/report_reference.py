"""MkDocs hook: the JSON report's reference, generated from its JSON Schema.

A page that holds the line ``<!-- legalize-report-schema -->`` gets, in its place, one
table per object of ``legalizer/report.schema.json`` (what ``legalize --schema``
prints): each key, whether every report has it, its type and its description. The
schema is the report's definition, so the page cannot drift from it."""

from __future__ import annotations

import json
from pathlib import Path

MARKER = "<!-- legalize-report-schema -->"
SCHEMA = Path(__file__).resolve().parents[2] / "legalizer" / "report.schema.json"


def _type(node: dict, defs: dict) -> str:
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[1]
        return f"`{name}` (below)" if name in ("check",) else _type(defs[name], defs)
    if "const" in node:
        return f"`{json.dumps(node['const'])}`"
    if "enum" in node:
        return " or ".join(f"`{json.dumps(v)}`" for v in node["enum"])
    if "anyOf" in node:
        return " or ".join(_type(n, defs) for n in node["anyOf"])
    t = node.get("type", "any")
    if t == "array":
        return f"list of {_type(node.get('items', {}), defs)}"
    if t == "object" and "properties" not in node and isinstance(node.get("additionalProperties"), dict):
        return f"object of {_type(node['additionalProperties'], defs)}"
    return {"integer": "integer", "number": "number", "string": "string", "boolean": "boolean",
            "null": "null", "object": "object"}.get(t, t)


def _table(title: str, node: dict, defs: dict, out: list, depth: int = 3) -> None:
    out.append(f"{'#' * depth} {title}\n")
    if node.get("description"):
        out.append(node["description"][:1].upper() + node["description"][1:] + ".\n")
    out.append("| key | always | type | value |\n| --- | --- | --- | --- |")
    required = set(node.get("required", ()))
    nested = []
    for key, sub in node["properties"].items():
        desc = sub.get("description", "")
        target = sub
        if sub.get("type") == "array" and isinstance(sub.get("items"), dict) and "properties" in sub["items"]:
            target = sub["items"]
        if "properties" in target and len(target["properties"]) > 1:
            nested.append((f"`{title.strip('`')}.{key}`" if title.startswith("`") else f"`{key}`", target))
        out.append(f"| `{key}` | {'yes' if key in required else ''} | {_type(sub, defs)} | {desc} |")
    out.append("")
    for name, sub in nested:
        _table(name, sub, defs, out, depth + 1)


def reference(schema_path: Path = SCHEMA) -> str:
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    defs = schema["$defs"]
    out = [schema["description"] + "\n"]
    _table("A run's report", defs["run"], defs, out)
    _table("`check`", defs["check"], defs, out)
    _table("A model that could not be processed", defs["error"], defs, out)
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (MkDocs' signature)
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, reference())
    return markdown
