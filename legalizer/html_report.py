"""The HTML report (``--html``): one self-contained page with the run's summary, its
violations and constraints, the numeric check per output and binding, and a picture of
every rewritten region (the elementwise node with its operands before and after the
passes, shapes on the edges, inserted nodes highlighted).

The page has no script and loads nothing: its pictures are inline SVG, laid out here
(each region is a handful of nodes: a layered layout does). Every text from the model
(node and value names, op types, messages) is escaped.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .region_pictures import Picture, PNode, Region, Regions
from .report import verdict
from .targets import TARGETS

# How many region pictures start unfolded; the others are one click away.
OPEN_PICTURES = 12
# Names longer than this are shortened in a picture (the full name is its tooltip).
MAX_LABEL = 34

FONT = "DejaVu Sans Mono, Menlo, Consolas, monospace"
CHAR_W = {12: 7.3, 11: 6.7, 10: 6.1}  # monospace advance per font size, a little generous

# Node styles by role (and kind): fill, stroke, stroke width, dash.
STYLE = {
    "center": ("#dbeafe", "#1d4ed8", 2.0, ""),
    "inserted": ("#fed7aa", "#c2410c", 2.0, ""),
    "inserted-const": ("#ffedd5", "#c2410c", 1.5, "4 2"),
    "original": ("#f3f4f6", "#6b7280", 1.0, ""),
    "original-io": ("#ffffff", "#6b7280", 1.0, "3 2"),
    "result": ("#ffffff", "#1d4ed8", 1.0, "3 2"),
    "culprit": ("#fee2e2", "#b91c1c", 3.0, ""),  # where a localization says the values start to differ
}


def text(s) -> str:
    """``s`` escaped for HTML and SVG text and attributes; control characters (not
    allowed in XML, and invisible) are shown as escapes."""
    s = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(s))
    return html.escape(s, quote=True)


def _short(s: str, n: int = MAX_LABEL) -> str:
    s = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(s))
    return s if len(s) <= n else s[: n - 12] + "\u2026" + s[-11:]


def _shape_label(shape: str) -> str:
    """An edge's shape as drawn: MLIR-style, and "scalar" for rank 0 (MLIR's empty)."""
    return shape if shape else "scalar"


def _fmt(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


# ---- layout --------------------------------------------------------------------------

@dataclass
class _Box:
    id: str
    w: float
    h: float
    layer: int = 0
    x: float = 0.0  # center
    y: float = 0.0  # top
    dummy: bool = False
    node: Optional[PNode] = None


def _separate(xs: List[float], widths: List[float], gap: float) -> List[float]:
    """Positions as close as possible (least squares) to ``xs``, in this order, with
    neighbours at least half their widths plus ``gap`` apart: isotonic regression
    (pool adjacent violators) on the positions less the cumulative separations."""
    if not xs:
        return []
    offs = [0.0]
    for a, b in zip(widths, widths[1:]):
        offs.append(offs[-1] + (a + b) / 2 + gap)
    ys = [x - o for x, o in zip(xs, offs)]
    blocks: List[List[float]] = []  # [sum, count]
    for y in ys:
        blocks.append([y, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    out: List[float] = []
    for s, c in blocks:
        out.extend([s / c] * int(c))
    return [y + o for y, o in zip(out, offs)]


def _node_size(n: PNode) -> Tuple[float, float]:
    if n.kind == "value":
        return len(_short("%" + n.name)) * CHAR_W[11] + 22, 24
    lines = (len(_short(n.op)) * CHAR_W[12], len(_short(n.name)) * CHAR_W[11])
    return max(lines) + 20, 38


LAYER_GAP = 62  # vertical room between layers: the edges and their shape labels
NODE_GAP = 18
MARGIN = 12


@dataclass
class _Layout:
    boxes: Dict[str, _Box]
    routes: List[Tuple[object, List[Tuple[float, float]]]]  # (edge, points)
    labels: List[Tuple[object, float, float, float]]  # (edge, x center, y center, width)
    width: float
    height: float


def _rank_layers(boxes: Dict[str, _Box], succ: Dict[str, List[str]],
                 pred: Dict[str, List[str]]) -> Tuple[List[str], int]:
    """Each box's layer: the height above the sinks (longest path down), counted in
    reverse topological order. Returns the topological order and the top layer."""
    order: List[str] = []
    indeg = {k: len(set(pred[k])) for k in boxes}
    ready = [k for k in boxes if indeg[k] == 0]
    while ready:
        k = ready.pop(0)
        order.append(k)
        for m in dict.fromkeys(succ[k]):
            indeg[m] -= 1
            if indeg[m] == 0:
                ready.append(m)
    order += [k for k in boxes if k not in order]  # (a cycle cannot happen; be safe)
    down: Dict[str, int] = {}
    for k in reversed(order):
        down[k] = max((down[m] + 1 for m in succ[k] if m in down), default=0)
    top = max(down.values(), default=0)
    for k, b in boxes.items():
        b.layer = top - down[k]
    return order, top


def _chains(pic: Picture, boxes: Dict[str, _Box]) -> List[Tuple[object, List[str]]]:
    """Each edge as a chain of boxes: long edges through one dummy per layer crossed
    (added to ``boxes``)."""
    chains: List[Tuple[object, List[str]]] = []
    for i, e in enumerate(pic.edges):
        a, z = boxes[e.src], boxes[e.dst]
        chain = [e.src]
        for layer in range(a.layer + 1, z.layer):
            d = _Box(f"_d{i}_{layer}", 6, 0, layer, dummy=True)
            boxes[d.id] = d
            chain.append(d.id)
        chain.append(e.dst)
        chains.append((e, chain))
    return chains


_Neighbours = Dict[str, List[Tuple[str, float]]]


def _neighbours(pic: Picture, boxes: Dict[str, _Box], chains) -> Tuple[_Neighbours, _Neighbours, Dict[str, int]]:
    """Each box's neighbours above and below along the chains, with the port's offset
    (a fraction of the target's width) where a chain enters an operand; and each
    box's number of operand ports."""
    up: _Neighbours = {k: [] for k in boxes}  # neighbour above, port
    below: _Neighbours = {k: [] for k in boxes}
    fan_in = {k: max([e.port for e in pic.edges if e.dst == k], default=0) + 1 for k in boxes}
    for e, chain in chains:
        for a, b in zip(chain, chain[1:]):
            frac = (e.port + 1) / (fan_in[e.dst] + 1) - 0.5 if b == e.dst else 0.0
            up[b].append((a, 0.0))
            below[a].append((b, frac))
    return up, below, fan_in


def _order_rows(layers: List[List[str]], up: _Neighbours, below: _Neighbours) -> None:
    """Orders each layer's row by its neighbours' barycenters, sweeping down and up."""
    pos = {k: float(i) for layer in layers for i, k in enumerate(layer)}

    def sweep(rows, neighbours):
        for row in rows:
            def bary(k):
                ns = neighbours[k]
                return sum(pos[m] + f for m, f in ns) / len(ns) if ns else pos[k]
            row.sort(key=lambda k: (bary(k), pos[k]))
            for i, k in enumerate(row):
                pos[k] = float(i)

    for _ in range(4):
        sweep(list(reversed(layers)), below)  # from the result up: operand order
        sweep(layers, up)
    sweep(list(reversed(layers)), below)


def _place_x(boxes: Dict[str, _Box], layers: List[List[str]], up: _Neighbours, below: _Neighbours) -> None:
    """x: packed first, then pulled toward the neighbours' mean, least squares per layer."""
    for row in layers:
        x = 0.0
        for k in row:
            b = boxes[k]
            b.x = x + b.w / 2
            x += b.w + NODE_GAP
    for it in range(12):
        rows = layers if it % 2 == 0 else list(reversed(layers))
        for row in rows:
            want = []
            for k in row:
                b = boxes[k]
                ns = [(boxes[m].x + f * boxes[m].w) for m, f in up[k]] + \
                     [(boxes[m].x - f * boxes[m].w) for m, f in below[k]]
                want.append(sum(ns) / len(ns) if ns else b.x)
            xs = _separate(want, [boxes[k].w for k in row], NODE_GAP)
            for k, x in zip(row, xs):
                boxes[k].x = x


def _place_y(boxes: Dict[str, _Box], layers: List[List[str]]) -> float:
    """y: each layer as tall as its tallest node. Returns the picture's height."""
    y = MARGIN
    for row in layers:
        h = max((boxes[k].h for k in row), default=0)
        for k in row:
            boxes[k].y = y + (h - boxes[k].h) / 2
        y += h + LAYER_GAP
    return y - LAYER_GAP + MARGIN


def _route(chains, boxes: Dict[str, _Box], layers: List[List[str]], fan_in: Dict[str, int]) -> Tuple[list, list]:
    """Edges from the bottom of the source to the operand's port on the target's top,
    and their shape labels midway on the last leg."""
    routes, labels = [], []
    for e, chain in chains:
        z = boxes[e.dst]
        pts = []
        a = boxes[chain[0]]
        pts.append((a.x, a.y + a.h))
        for k in chain[1:-1]:
            d = boxes[k]
            row_top = min(boxes[m].y for m in layers[d.layer])
            row_h = max(boxes[m].y + boxes[m].h for m in layers[d.layer]) - row_top
            pts += [(d.x, row_top), (d.x, row_top + row_h)]
        px = z.x + ((e.port + 1) / (fan_in[e.dst] + 1) - 0.5) * z.w * 0.8
        pts.append((px, z.y))
        routes.append((e, pts))
        (x1, y1), (x2, y2) = pts[-2], pts[-1]
        labels.append([e, (x1 + x2) / 2, (y1 + y2) / 2, len(_short(_shape_label(e.shape), 24)) * CHAR_W[10] + 8])
    return routes, labels


def _spread_labels(labels: list) -> None:
    """Labels of one gap between layers: kept apart, in order."""
    by_gap: Dict[float, list] = {}
    for lab in labels:
        by_gap.setdefault(round(lab[2]), []).append(lab)
    for labs in by_gap.values():
        labs.sort(key=lambda lab: lab[1])
        for lab, x in zip(labs, _separate([lab[1] for lab in labs], [lab[3] for lab in labs], 4)):
            lab[1] = x


def layout(pic: Picture) -> _Layout:
    """A layered (Sugiyama-style) layout, top to bottom: layers by longest path to the
    result, long edges through dummy points, order by barycenters, positions by least
    squares."""
    boxes: Dict[str, _Box] = {}
    for n in pic.nodes:
        w, h = _node_size(n)
        boxes[n.id] = _Box(n.id, w, h, node=n)
    succ: Dict[str, List[str]] = {k: [] for k in boxes}
    pred: Dict[str, List[str]] = {k: [] for k in boxes}
    for e in pic.edges:
        succ[e.src].append(e.dst)
        pred[e.dst].append(e.src)
    order, top = _rank_layers(boxes, succ, pred)
    chains = _chains(pic, boxes)
    up, below, fan_in = _neighbours(pic, boxes, chains)
    layers: List[List[str]] = [[] for _ in range(top + 1)]
    for k in order + [k for k in boxes if boxes[k].dummy]:
        layers[boxes[k].layer].append(k)
    _order_rows(layers, up, below)
    _place_x(boxes, layers, up, below)
    height = _place_y(boxes, layers)
    routes, labels = _route(chains, boxes, layers, fan_in)
    _spread_labels(labels)

    # shift everything right of the margin
    lefts = [b.x - b.w / 2 for b in boxes.values()] + [lab[1] - lab[3] / 2 for lab in labels]
    rights = [b.x + b.w / 2 for b in boxes.values()] + [lab[1] + lab[3] / 2 for lab in labels]
    dx = MARGIN - min(lefts)
    for b in boxes.values():
        b.x += dx
    routes = [(e, [(x + dx, y) for x, y in pts]) for e, pts in routes]
    labels = [(e, x + dx, y, w) for e, x, y, w in labels]
    width = max(rights) + dx + MARGIN
    return _Layout(boxes, routes, labels, width, height)


# ---- SVG -------------------------------------------------------------------------------

def _style_key(n: PNode) -> str:
    if n.role == "inserted":
        return "inserted-const" if n.kind == "const" else "inserted"
    if n.role == "original" and n.kind in ("input", "const"):
        return "original-io"
    return n.role


def _path(pts: Sequence[Tuple[float, float]]) -> str:
    d = f"M{_fmt(pts[0][0])},{_fmt(pts[0][1])}"
    for (x1, y1), (x2, y2) in zip(pts, pts[1:]):
        if abs(x1 - x2) < 0.5:
            d += f" L{_fmt(x2)},{_fmt(y2)}"
        else:
            my = (y1 + y2) / 2
            d += f" C{_fmt(x1)},{_fmt(my)} {_fmt(x2)},{_fmt(my)} {_fmt(x2)},{_fmt(y2)}"
    return d


def svg(pic: Picture, title: str = "", uid: str = "", highlight: str = "") -> str:
    """One picture as an inline ``<svg>`` element (well-formed XML); ``uid`` makes its
    ids unique within a page of many pictures; the op named ``highlight`` (the culprit
    of a localization) is drawn in red."""
    lay = layout(pic)
    arrow = f"arrow-{uid}" if uid else "arrow"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="region-svg" width="{_fmt(lay.width)}" '
           f'height="{_fmt(lay.height)}" viewBox="0 0 {_fmt(lay.width)} {_fmt(lay.height)}" role="img" '
           f'aria-label="{text(title)}" font-family="{FONT}">',
           f'<defs><marker id="{arrow}" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 z" fill="#4b5563"/></marker></defs>']
    if title:
        out.append(f"<title>{text(title)}</title>")
    for e, pts in lay.routes:
        inserted = any(lay.boxes[k].node.role == "inserted" for k in (e.src, e.dst))
        color = "#c2410c" if inserted else "#4b5563"
        out.append(f'<path class="edge" d="{_path(pts)}" fill="none" stroke="{color}" stroke-width="1.3" '
                   f'marker-end="url(#{arrow})"/>')
    for e, x, y, w in lay.labels:
        out.append(f'<g class="shape"><rect x="{_fmt(x - w / 2)}" y="{_fmt(y - 8)}" width="{_fmt(w)}" height="15" '
                   f'rx="3" fill="#ffffff" fill-opacity="0.92" stroke="#e5e7eb"/>'
                   f'<text x="{_fmt(x)}" y="{_fmt(y + 3.5)}" font-size="10" text-anchor="middle" fill="#111827">'
                   f'{text(_short(_shape_label(e.shape), 24))}</text><title>{text(_shape_label(e.shape))}</title></g>')
    for b in lay.boxes.values():
        if b.dummy:
            continue
        n = b.node
        culprit = bool(highlight) and n.kind == "op" and n.name == highlight
        fill, stroke, sw, dash = STYLE["culprit" if culprit else _style_key(n)]
        x0, y0 = b.x - b.w / 2, b.y
        rx = b.h / 2 if n.kind == "value" else 6
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        tip = f"{n.op} {n.name}" if n.kind != "value" else f"result value {n.name}"
        if n.role == "inserted":
            tip += " (inserted)"
        if culprit:
            tip += " (culprit: the first value that differs)"
        role = "culprit" if culprit else n.role
        out.append(f'<g class="node {text(role)} {text(n.kind)}" data-name="{text(n.name)}"><title>{text(tip)}</title>'
                   f'<rect x="{_fmt(x0)}" y="{_fmt(y0)}" width="{_fmt(b.w)}" height="{_fmt(b.h)}" rx="{_fmt(rx)}" '
                   f'fill="{fill}" stroke="{stroke}" stroke-width="{sw}"{dash_attr}/>')
        if n.kind == "value":
            out.append(f'<text x="{_fmt(b.x)}" y="{_fmt(y0 + 16)}" font-size="11" text-anchor="middle" '
                       f'fill="#1e3a8a">{text(_short("%" + n.name))}</text>')
        else:
            italic = ' font-style="italic"' if n.kind in ("input", "const") else ""
            out.append(f'<text x="{_fmt(b.x)}" y="{_fmt(y0 + 15)}" font-size="12" font-weight="bold" '
                       f'text-anchor="middle" fill="#111827"{italic}>{text(_short(n.op))}</text>'
                       f'<text x="{_fmt(b.x)}" y="{_fmt(y0 + 30)}" font-size="11" text-anchor="middle" '
                       f'fill="#374151">{text(_short(n.name))}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


# ---- the page --------------------------------------------------------------------------

CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       margin: 0; color: #111827; background: #f9fafb; }
main { max-width: 1200px; margin: 0 auto; padding: 20px 28px 48px; }
h1 { font-size: 22px; margin: 4px 0 2px; word-break: break-all; }
h2 { font-size: 17px; margin: 28px 0 8px; padding-bottom: 4px; border-bottom: 1px solid #e5e7eb; }
code, .mono { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12.5px; }
.verdict { display: inline-block; margin: 8px 0 4px; padding: 6px 12px; border-radius: 6px; font-weight: 600; }
.verdict.ok { background: #dcfce7; color: #166534; border: 1px solid #86efac; }
.verdict.bad { background: #fee2e2; color: #991b1b; border: 1px solid #fca5a5; }
.verdict.warn { background: #fef9c3; color: #854d0e; border: 1px solid #fde047; }
table { border-collapse: collapse; background: #fff; margin: 6px 0; }
th, td { border: 1px solid #e5e7eb; padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #f3f4f6; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 10px 0; }
.card { background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 8px 14px; min-width: 120px; }
.card .n { font-size: 22px; font-weight: 650; }
.card .l { color: #4b5563; font-size: 12px; }
.muted { color: #6b7280; }
.pass { color: #166534; font-weight: 600; } .fail { color: #991b1b; font-weight: 600; }
.skip { color: #6b7280; }
details.region { background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; margin: 10px 0; }
details.region > summary { cursor: pointer; padding: 8px 12px; }
details.region[open] > summary { border-bottom: 1px solid #e5e7eb; }
.pair { display: flex; flex-wrap: wrap; gap: 18px; padding: 10px 12px; align-items: flex-start; }
figure { margin: 0; overflow-x: auto; max-width: 100%; }
figure.after { border-left: 1px dashed #d1d5db; padding-left: 18px; }
.changes { color: #374151; font-size: 12.5px; margin-left: 6px; }
figcaption { font-size: 12px; font-weight: 600; color: #4b5563; text-transform: uppercase; letter-spacing: .04em;
             margin-bottom: 4px; }
.legend { display: flex; flex-wrap: wrap; gap: 14px; font-size: 12.5px; margin: 6px 0 2px; }
.legend span.sw { display: inline-block; width: 14px; height: 12px; border-radius: 3px; vertical-align: -1px;
                  margin-right: 5px; border: 1.5px solid; }
.tag { display: inline-block; background: #ffedd5; color: #9a3412; border-radius: 4px; padding: 0 6px;
       font-size: 12px; margin-left: 4px; }
.note { background: #fffbeb; border: 1px solid #fde68a; border-radius: 6px; padding: 8px 12px; }
ul.warnings li { margin: 2px 0; }
.tag.culprit { background: #fee2e2; color: #991b1b; }
.hists { display: flex; flex-wrap: wrap; gap: 14px; }
figure.hist { background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 6px 10px; }
figure.culprit-picture { background: #fff; border: 1px solid #fca5a5; border-radius: 8px; padding: 8px; display: inline-block; }
"""

_STAT_LABELS = {
    "nodes_in": "nodes in", "nodes_out": "nodes out", "elementwise_nodes": "elementwise nodes",
    "reshapes_inserted": "reshapes inserted", "broadcasts_made_explicit": "broadcasts made explicit",
    "constants_folded": "constants folded", "runtime_broadcast_checks": "runtime broadcast checks",
    "runtime_broadcast_checks_elided": "runtime broadcast checks elided",
}


def _shape(s) -> str:
    return "*" if s is None else "x".join(str(d) for d in s)


def _table(head: Optional[Sequence[str]], rows: Iterable[Sequence[str]], num: Sequence[int] = (),
           cls: str = "") -> str:
    out = [f'<table class="{cls}">' if cls else "<table>"]
    if head:
        out += ["<thead><tr>", "".join(f"<th>{text(h)}</th>" for h in head), "</tr></thead>"]
    out.append("<tbody>")
    for row in rows:
        out.append("<tr>" + "".join(f'<td class="num">{c}</td>' if i in num else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _summary(rep: dict) -> str:
    st = rep.get("stats", {})
    keys = ["nodes_in", "nodes_out", "elementwise_nodes", "reshapes_inserted", "constants_folded"]
    spec = TARGETS.get(rep.get("target")) if isinstance(rep.get("target"), str) else None  # (a report read back)
    if (spec is not None and spec.explicit_broadcasts) or any(st.get(k) for k in ("broadcasts_made_explicit",
                                                                                   "runtime_broadcast_checks")):
        keys += ["broadcasts_made_explicit", "runtime_broadcast_checks", "runtime_broadcast_checks_elided"]
    keys = [k for k in keys if k in st]  # (a library caller may give the passes' counters only)
    cards = "".join(f'<div class="card"><div class="n">{int(st.get(k, 0)):,}</div>'
                    f'<div class="l">{text(_STAT_LABELS[k])}</div></div>' for k in keys)
    outputs = rep.get("outputs") or ({"": rep["output"]} if rep.get("output") else {})
    meta = [("input", f"<code>{text(rep.get('input'))}</code> ({text(rep.get('format'))})"),
            ("output", "<br>".join(f"<code>{text(p)}</code>" + (f" ({text(f)})" if f else "")
                                   for f, p in outputs.items()) or '<span class="muted">none written</span>'),
            ("target", text(rep.get("target"))), ("input profile", text(rep.get("profile"))),
            ("violations", str(len(rep.get("violations", [])))),
            ("runtime constraints", str(len(rep.get("constraints", [])))),
            ("tool version", text(rep.get("tool_version", "")))]
    timings = rep.get("timings_s") or {}
    if timings:
        meta.append(("timings", ", ".join(f"{text(k)} {float(v):.3f} s" for k, v in timings.items())))
    out = [f'<div class="cards">{cards}</div>',
           _table(None, [(f"<b>{text(k)}</b>", v) for k, v in meta], cls="meta")]
    if rep.get("warnings"):
        out.append('<h3>Warnings</h3><ul class="warnings">' +
                   "".join(f"<li>{text(w)}</li>" for w in rep["warnings"]) + "</ul>")
    return "".join(out)


def _violations(rep: dict) -> str:
    vio = rep.get("violations", [])
    if not vio:
        return '<p class="muted">None: every elementwise node is legal.</p>'
    rows = [(text(v.get("stage", "")), f"<code>{text(v.get('code', ''))}</code>",
             f"<code>{text(v.get('node', ''))}</code>" + (f"<br><span class='muted'>in {text(v['graph'])}</span>"
                                                          if v.get("graph") else ""),
             text(v.get("op", "")), text(v.get("message", "")),
             "<code>" + ", ".join(text(_shape(s)) for s in v.get("operand_shapes") or []) + "</code>",
             f"<code>{text(_shape(v.get('result_shape')))}</code>",
             text("" if v.get("dim") is None else v.get("dim")))
            for v in vio]
    return _table(["stage", "code", "node", "op", "message", "operand shapes", "result shape", "dim"], rows)


def _constraints(rep: dict) -> str:
    cons = rep.get("constraints", [])
    if not cons:
        return '<p class="muted">None: every broadcast is decided statically.</p>'
    rows = [(f"<code>{text(c.get('text', ''))}</code>",
             ", ".join(f"<code>{text(n)}</code>" for n in c.get("nodes", []))) for c in cons]
    return _table(["constraint (checked at run time)", "nodes"], rows)


def _check(rep: dict) -> str:
    chk = rep.get("check") or {"ran": False}
    if not chk.get("ran"):
        why = chk.get("error") or ("--no-check" if rep.get("output") else "nothing was legalized")
        return f'<p class="muted">Not run: {text(why)}.</p>'
    head = (f'<p>Provider <code>{text(chk.get("provider", ""))}</code>: '
            + ('<span class="pass">outputs match</span>' if chk.get("ok") else '<span class="fail">outputs differ</span>')
            + (f' <span class="muted">({text(chk["error"])})</span>' if chk.get("error") else "") + "</p>")
    rows = []
    for b in chk.get("bindings", []):
        dims = ", ".join(f"{k}={v}" for k, v in (b.get("dims") or {}).items()) or "static shapes"
        if b.get("skipped"):
            rows.append((text(dims), "", '<span class="skip">SKIPPED</span>', "", "", text(b["skipped"])))
            continue
        for o in b.get("outputs", []):
            status = '<span class="pass">PASSED</span>' if o.get("ok") else '<span class="fail">FAILED</span>'
            rows.append((text(dims), f"<code>{text(o.get('name', ''))}</code>", status,
                         f"{float(o.get('max_abs_err', 0.0)):.3g}", f"{float(o.get('max_rel_err', 0.0)):.3g}",
                         text(o.get("detail") or "")))
    return head + _table(["binding", "output", "status", "max abs err", "max rel err", "detail"], rows, num=(3, 4))


def _legend() -> str:
    items = [("center", "elementwise node"), ("inserted", "inserted op"), ("inserted-const", "new (folded) constant"),
             ("original", "original op"), ("original-io", "graph input / original constant")]
    out = []
    for key, label in items:
        fill, stroke, _, dash = STYLE[key]
        border = "dashed" if dash else "solid"
        out.append(f'<span><span class="sw" style="background:{fill};border-color:{stroke};'
                   f'border-style:{border}"></span>{text(label)}</span>')
    return '<div class="legend">' + "".join(out) + "<span>edge labels: value shapes</span></div>"


def _operand_changes(r: Region) -> List[Tuple[str, str, str]]:
    """(operand producer's name, shape before, shape after) of each operand whose shape
    the rewrite changed."""
    def into_center(pic: Picture) -> Dict[int, Tuple[str, str]]:
        names = {n.id: n.name for n in pic.nodes}
        return {e.port: (names[e.src], e.shape) for e in pic.edges if e.dst == "c"}

    before, after = into_center(r.before), into_center(r.after)
    return [(before[i][0], before[i][1] or "scalar", after[i][1] or "scalar")
            for i in sorted(before) if i in after and before[i][1] != after[i][1]]


def _region(k: int, r: Region, culprit: str = "") -> str:
    ins: Dict[str, int] = {}
    for n in r.inserted:
        ins[n.op] = ins.get(n.op, 0) + 1
    tags = "".join(f'<span class="tag">+{c} {text(op)}</span>' if c > 1 else f'<span class="tag">+{text(op)}</span>'
                   for op, c in sorted(ins.items()))
    where = f' <span class="muted">in {text(r.graph)}</span>' if r.graph else ""
    changes = _operand_changes(r)
    if changes:
        where += ' <span class="changes">' + "; ".join(
            f"<code>{text(_short(name, 24))}</code> {text(a)} \u2192 {text(b)}" for name, a, b in changes) + "</span>"
    title = f"{r.op} {r.node}"
    if culprit and any(n.name == culprit and n.kind == "op" for n in r.after.nodes):
        tags += '<span class="tag culprit">culprit</span>'
    note = ('<p class="muted" style="padding:0 12px">The inserted nodes go on beyond what is drawn.</p>'
            if r.after.truncated else "")
    return (f'<details class="region" id="region-{k}"{" open" if k < OPEN_PICTURES else ""}>'
            f'<summary><b>{text(r.op)}</b> <code>{text(r.node)}</code>{where} {tags}</summary>'
            f'<div class="pair"><figure class="before"><figcaption>before</figcaption>{svg(r.before, title + " before", f"{k}b", culprit)}'
            f'</figure><figure class="after"><figcaption>after</figcaption>{svg(r.after, title + " after", f"{k}a", culprit)}</figure>'
            f"</div>{note}</details>")


def _regions(rep: dict, regions: Optional[Regions], culprit: str = "") -> str:
    if regions is None:
        if rep.get("output"):
            return '<p class="muted">Not recorded.</p>'
        return '<p class="muted">None: the model was not legalized.</p>'
    if not regions.total:
        return '<p class="muted">None: no elementwise node needed a rewrite.</p>'
    ops = ", ".join(f"{text(op)} {c:,}" for op, c in sorted(regions.by_op.items(), key=lambda t: (-t[1], t[0])))
    out = [f"<p>{regions.total:,} elementwise node{'s' if regions.total != 1 else ''} rewritten ({ops}).",
           (f" The first {OPEN_PICTURES} pictures are open; click a heading to open the others." 
            if len(regions.regions) > OPEN_PICTURES else ""), "</p>", _legend()]
    if regions.omitted:
        out.append(f'<p class="note">{regions.omitted:,} more rewritten region{"s are" if regions.omitted != 1 else " is"}'
                   f" not drawn: this page draws the first {len(regions.regions):,}.</p>")
    out += [_region(k, r, culprit) for k, r in enumerate(regions.regions)]
    return "".join(out)


def _culprit_node(rep: dict) -> str:
    div = (rep.get("check") or {}).get("divergence") or []
    return str(div[0].get("node", "")) if div else ""


def _histogram(stats: dict, title: str) -> str:
    """An output's absolute errors per decade, as a small bar chart (inline SVG)."""
    hist = stats.get("histogram") or {}
    counts, edges = hist.get("counts") or [], hist.get("edges") or []
    if not counts or len(counts) != len(edges) + 1:
        return ""
    labels = [f"\u2264{edges[0]:.0e}"] + [f"{e:.0e}" for e in edges[1:]] + [f">{edges[-1]:.0e}"]
    bar_w, h, top = 34, 60, max(counts) or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="histogram" width="{bar_w * len(counts) + 8}" '
             f'height="{h + 34}" role="img" aria-label="{text(title)}" font-family="{FONT}"><title>{text(title)}</title>']
    for i, (c, label) in enumerate(zip(counts, labels)):
        bh = 0 if not c else max(2.0, h * c / top)
        x = 4 + i * bar_w
        parts.append(f'<g><title>{text(label)}: {c:,}</title><rect x="{x + 3}" y="{_fmt(h - bh + 12)}" '
                     f'width="{bar_w - 6}" height="{_fmt(bh)}" fill="#60a5fa"/>'
                     f'<text x="{x + bar_w / 2}" y="{_fmt(h - bh + 9)}" font-size="9" text-anchor="middle">'
                     f'{c if c else ""}</text><text x="{x + bar_w / 2}" y="{h + 26}" font-size="8.5" '
                     f'text-anchor="middle" fill="#374151">{text(label)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def _histograms(rep: dict) -> str:
    """The error histogram of each compared output (the first binding that differs,
    else the first one), with its statistics."""
    chk = rep.get("check") or {}
    compared = [b for b in chk.get("bindings", []) if not b.get("skipped")]
    pick = next((b for b in compared if not b.get("ok")), compared[0] if compared else None)
    if pick is None:
        return ""
    dims = ", ".join(f"{k}={v}" for k, v in (pick.get("dims") or {}).items()) or "static shapes"
    out = []
    for o in pick.get("outputs", [])[:OPEN_PICTURES]:
        st = o.get("stats") or {}
        if "mean_abs_err" not in st:
            continue
        line = (f"mean {st['mean_abs_err']:.3g}, p50 {st['p50_abs_err']:.3g}, p90 {st['p90_abs_err']:.3g}, "
                f"p99 {st['p99_abs_err']:.3g}, max {float(o.get('max_abs_err', 0.0)):.3g}; "
                f"{st['mismatched']:,} of {st['total']:,} elements outside the tolerances")
        out.append(f'<figure class="hist"><figcaption><code>{text(o.get("name", ""))}</code></figcaption>'
                   f'{_histogram(st, "absolute errors of " + str(o.get("name", "")))}'
                   f'<div class="muted">{text(line)}</div></figure>')
    if not out:
        return ""
    return (f'<h3>Absolute errors per decade ({text(dims)})</h3><div class="hists">' + "".join(out) + "</div>")


def _divergence(rep: dict, culprit: Optional[Picture]) -> str:
    chk = rep.get("check") or {}
    loc = chk.get("localize") or {}
    div = chk.get("divergence") or []
    dims = ", ".join(f"{k}={v}" for k, v in (loc.get("binding") or {}).items()) or "static shapes"
    head = (f'<p>Intermediate values compared on <code>{text(loc.get("runtimes", ""))}</code> ({text(dims)}): '
            f'{int(loc.get("compared", 0)):,} matched, {len(div):,} differ; {int(loc.get("runs", 0))} runs, '
            f'{float(loc.get("seconds", 0.0)):.3f} s.</p>')
    if loc.get("note"):
        head += f'<p class="note">{text(loc["note"])}</p>'
    if not div:
        return head + '<p class="muted">No intermediate value differs beyond the tolerances.</p>'
    c = div[0]
    ref = f" (the reference's <code>{text(c['reference'])}</code>" + \
        (f", {text(c['reference_op'])})" if c.get("reference_op") else ")") if c.get("reference") else ""
    through = loc.get("region") or []
    via = ("; computed from matching values through " + ", ".join(
        f"<code>{text(r['op'])} {text(r['node'])}</code>" for r in through)) if through else ""
    out = [head, f'<p class="culprit-line"><b>Culprit:</b> node <code>{text(c["node"])}</code> '
                 f'({text(c["op"])}), value <code>{text(c["value"])}</code>{ref}{via}.</p>']
    if culprit is not None:
        out.append('<figure class="culprit-picture">' + svg(culprit, f"culprit {c['node']}", "culprit", c["node"]) +
                   "</figure>")
    rows = [(f"<code>{text(d['node'])}</code>", text(d["op"]), f"<code>{text(d['value'])}</code>",
             f"<code>{text(d.get('reference', ''))}</code>", f"{float(d['max_abs_err']):.3g}",
             f"{float(d['max_rel_err']):.3g}", f"{int(d['mismatched']):,} / {int(d['total']):,}",
             text(d.get("detail", ""))) for d in div[:200]]
    out.append(_table(["node", "op", "value", "reference", "max abs err", "max rel err", "elements differing",
                       "detail"], rows, num=(4, 5, 6)))
    if len(div) > 200:
        out.append(f'<p class="muted">{len(div) - 200:,} more values differ.</p>')
    return "".join(out)


def render(report: Union[dict, "object"], regions: Optional[Regions] = None, culprit: Optional[Picture] = None) -> str:
    """The page, as a string. ``report`` is a ``Report`` or its JSON (``to_json()``, or
    a ``--report`` file read back); ``region_pictures`` comes from ``region_pictures.snapshot``;
    ``culprit`` from ``region_pictures.culprit_picture`` (a localization's culprit)."""
    rep = report if isinstance(report, dict) else report.to_json()
    kind, line = verdict(rep, legalizing=rep.get("output") is not None or bool(rep.get("outputs")),
                         arrow="\u2192")
    title = f"legalize report: {rep.get('input', '')}"
    n = regions.total if regions is not None else 0
    sections = [
        ("summary", "Summary", _summary(rep)),
        ("violations", f"Violations ({len(rep.get('violations', []))})", _violations(rep)),
        ("constraints", f"Runtime constraints ({len(rep.get('constraints', []))})", _constraints(rep)),
        ("check", "Numeric check", _check(rep) + _histograms(rep)),
    ]
    if (rep.get("check") or {}).get("localize") is not None:
        sections.append(("divergence", "Where it differs", _divergence(rep, culprit)))
    sections.append(("regions", f"Rewritten regions ({n:,})", _regions(rep, regions, _culprit_node(rep))))
    body = "".join(f'<section id="{sid}"><h2>{text(h)}</h2>{content}</section>' for sid, h, content in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{text(title)}</title><style>{CSS}</style></head><body><main>"
            f"<h1>legalize: <code>{text(rep.get('input', ''))}</code></h1>"
            f'<div class="verdict {kind}">{text(line)}</div>{body}</main></body></html>\n')


def check_path(path, protect: Iterable = ()) -> None:
    """UsageError unless the page can be written at ``path``: call it before the work.
    ``protect`` holds the input model and the output path, which may not exist yet."""
    from .errors import UsageError
    from .atomic_files import check_output_path, same_file

    path = Path(path)
    for p in protect:
        if p is not None and same_file(path, Path(p)):
            raise UsageError(f"{path}: the HTML report cannot replace a model file")
    check_output_path(path, force=True)


def write(path, report, regions: Optional[Regions] = None, protect: Iterable = (),
          culprit: Optional[Picture] = None) -> Path:
    """Write the page atomically at ``path`` (an existing page is replaced); never over
    a path in ``protect`` (the input model, the written outputs)."""
    from .errors import UsageError
    from .atomic_files import atomic_output, same_file

    path = Path(path)
    for p in protect:
        if p is not None and same_file(path, Path(p)):
            raise UsageError(f"{path}: the HTML report cannot replace a model file")
    page = render(report, regions, culprit)
    with atomic_output(path, force=True) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return path
