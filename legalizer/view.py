"""``legalize view MODEL``: Google's Model Explorer with the original and the legalized
model side by side and the run's overlays loaded (the ``viewer`` extra).

It runs the job (the legalized model is written into a temporary folder, removed when
the server stops), or with ``--report`` reads a finished run's report and shows the
model it wrote. The server runs until ^C; ``--no-browser`` prints the page's address
instead of opening it.

``view`` is a word the command line reserves: a model file named ``view`` is given as
``./view`` (``legalize ./view``), as ``legalize view`` is always this command.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import List, Optional, Tuple
from urllib.parse import quote

import typer

from .errors import UsageError, first_line
from .extras import importable, install_hint
from .targets import DEFAULT_TARGET, TARGETS

ONNX_EXTENSION = "model_explorer_onnx"  # the adapter Model Explorer loads for .onnx files

HELP = """Open MODEL in Model Explorer beside its legalized form, with legalize's overlays
(verdicts, rewrites, runtime constraints, and where a localization ran, each value's
error) loaded. Needs the viewer extra.

\b
Examples:
  legalize view model.onnx                   # run the job, open the browser
  legalize view model.onnx --no-browser      # print the address instead
  legalize view model.onnx --report r.json   # a finished run (its report and output)
  legalize ./view                            # (legalize a model file named 'view')
"""


def available() -> bool:
    return importable("model_explorer", ONNX_EXTENSION)


def require() -> None:
    if not available():
        raise UsageError(f"legalize view needs the viewer extra: {install_hint('viewer')}")


def pane(model: Path, graph_id: str, node: str = "") -> dict:
    """One pane of Model Explorer's page state: ``model``'s graph ``graph_id``, every
    layer expanded (the page's ``___all___``), ``node`` selected (its node data in the
    side panel)."""
    return {"deepestExpandedGroupNodeIds": ["___all___"], "selectedNodeId": node, "selectedGraphId": graph_id,
            "selectedCollectionLabel": Path(model).name, "widthFraction": 0.5, "selected": False}


def page_url(host: str, port: int, models: List[Path], overlays: List[Tuple[Path, Path]],
             graph_ids: List[str], token: str = "") -> str:
    """The address of the page with ``models`` loaded (one pane each, side by side) and
    each overlay applied to its model ((model, overlay) pairs). The page fetches them
    from the server by index (``graphs://<name>/<i>``, ``node_data://<name>/<i>``), never
    by path; ``token`` opens the server (``view_server``)."""
    data = {"models": [{"url": f"graphs://{Path(m).name}/{i}"} for i, m in enumerate(models)],
            "nodeData": [f"node_data://{Path(o).name}/{i}" for i, (_, o) in enumerate(overlays)],
            "nodeDataTargets": [Path(m).name for m, _ in overlays]}
    if len(models) == 2:
        data["uiState"] = {"paneStates": [pane(m, g) for m, g in zip(models, graph_ids)]}
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"http://{netloc}/?token={token}&data={quote(json.dumps(data))}"


def _graph_ids(model: Path) -> List[str]:
    from .explorer_ids import model_ids
    from .kinds.registry import named, sniff

    return [g.id for g in model_ids(model, named(sniff(model)))]


def page_ids(models: List[Path]) -> List[dict]:
    """Per model, its graph ids as the page shows them when the models are loaded
    together: the page gives a graph whose id an earlier one has ``<id> (2)``,
    ``<id> (3)``, ... (the original and the legalized model share their ids)."""
    seen: dict = {}
    out = []
    for m in models:
        ids = {}
        for gid in _graph_ids(m):
            k = seen.get(gid)
            seen[gid] = 1 if k is None else k + 1
            ids[gid] = gid if k is None else f"{gid} ({k + 1})"
        out.append(ids)
    return out


def _rekey(path: Path, ids: dict) -> None:
    """An overlay file keyed by the page's graph ids (``page_ids``)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({ids.get(g, g): v for g, v in data.items()}), encoding="utf-8")


def _adapter(path: Path):
    """The Model Explorer adapter that draws the model at ``path``, taken by its class
    (its kind's ``explorer_adapter``; no extension registry: the ``.pt2`` adapter, which
    unpickles, is not even imported)."""
    from .kinds.base import resolve
    from .kinds.registry import named, sniff

    return resolve(named(sniff(path)).explorer_adapter)()


def _convert(models: List[Path]) -> List[str]:
    """Each model's graphs as Model Explorer draws them (the ONNX adapter, the built-in
    TFLite flatbuffer reader: both read data), as JSON, made before the server starts:
    the page gets them by index."""
    from model_explorer.utils import convert_adapter_response

    out = []
    for m in models:
        _drawable(m)
        try:
            graphs = _adapter(m).convert(str(m), {})
        except Exception as e:  # the adapters' own errors: one line, not their traceback
            raise UsageError(f"{m}: Model Explorer cannot draw it: {type(e).__name__}: {first_line(e)}") from None
        out.append(json.dumps(convert_adapter_response(graphs)))
    return out


def _bind(host: str, port: int, expose: bool) -> Tuple[tuple, int]:
    """The address to listen on, and its family. A host that is not loopback needs
    ``--expose``: the page is then served to whoever reaches it and has its token."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise UsageError(f"--host {host}: cannot resolve it: {e}") from None
    loopback = all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback for i in infos)
    if not loopback and not expose:
        raise UsageError(f"--host {host}: not a loopback address; give --expose to serve the models' graphs and"
                         " overlays to other machines")
    # localhost may resolve to ::1 first: the IPv4 address where there is one, as the
    # browser and most clients try it too
    family, _, _, _, address = next((i for i in infos if i[0] == socket.AF_INET), infos[0])
    return address, family


def _serve(host: str, port: int, models: List[Path], overlays: List[Tuple[Path, Path]], browser: bool,
           expose: bool = False) -> None:
    """Serve the page with the models and overlays (``view_server``); block until ^C."""
    import model_explorer

    from .view_server import ViewServer, bundle

    address, family = _bind(host, port, expose)
    ids = page_ids(models)
    for m, o in overlays:
        _rekey(o, ids[models.index(m)])
    graphs = _convert(models)
    node_data = [o.read_text(encoding="utf-8") for _, o in overlays]
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        httpd = ViewServer(address, bundle(Path(model_explorer.__file__).parent / "web_app"), graphs, node_data,
                           host_header=netloc, family=family)
    except OSError as e:
        raise UsageError(f"--port {port}: cannot listen on {host}:{port}: {e.strerror}") from None
    url = page_url(host, port, models, overlays, [next(iter(i.values()), "") for i in ids], httpd.token)
    print(f"legalize view: {url}", flush=True)
    if browser:
        threading.Thread(target=_open_when_up, args=(host, port, url), daemon=True).start()
    with httpd:
        httpd.serve_forever()


def _open_when_up(host: str, port: int, url: str, timeout: float = 60.0) -> None:
    import webbrowser

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection((host, port), timeout=1):
                webbrowser.open_new_tab(url)
                return
        except OSError:
            time.sleep(0.3)


def _port_free(host: str, port: int, address: tuple, family: int) -> None:
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind(address)
        except OSError as e:
            raise UsageError(f"--port {port}: cannot listen on {host}:{port}: {e.strerror}") from None


def _from_report(model: Path, report: Path, folder: Path) -> Tuple[List[Path], List[Tuple[Path, Path]]]:
    from . import overlay

    try:
        data = json.loads(Path(report).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UsageError(f"--report {report}: cannot read it as a legalize report: {e}") from None
    if not isinstance(data, dict) or "violations" not in data:
        raise UsageError(f"--report {report}: not a legalize report of one model")
    output = Path(data["output"]) if data.get("output") else None
    if output is not None and not output.is_file():
        raise UsageError(f"--report {report}: its output {output} is not there any more")
    if output is not None:
        _drawable(output, f"--report {report}: its output ")
    made = overlay.node_data(model, data, output)
    return _written(folder, model, output, made)


def _drawable(path: Path, what: str = "") -> None:
    """Refuse, before any work, a model the view cannot draw (a ``.pt2``: its adapter
    unpickles, and it is not served)."""
    from .kinds.registry import named, sniff

    fmt = sniff(path)
    kind = named(fmt)
    if kind is None or kind.explorer_adapter is None:
        raise UsageError(f"{what}{path}: legalize view shows ONNX and TFLite models, not {fmt}")


def _written(folder: Path, model: Path, output: Optional[Path], made) -> Tuple[List[Path], List[Tuple[Path, Path]]]:
    from . import overlay

    where = overlay.paths(folder, model, output)
    pairs = []
    for side, m in (("input", model), ("output", output)):
        for kind, data in made.get(side, {}).items():
            path = where[side][kind]
            path.write_text(json.dumps(data), encoding="utf-8")
            pairs.append((Path(m), path))
    # The page colours the nodes by the last node data it loads: the verdicts.
    pairs.sort(key=lambda p: p[1].name.endswith(".verdict.json"))
    return [m for m in (model, output) if m is not None], pairs


def _run_job(model: Path, target: str, localize: Optional[bool], folder: Path):
    from . import overlay
    from .console import Printer
    from .pipeline import RunOptions, default_output, run

    output = folder / default_output(model).name
    res = run(model, RunOptions(target=target, output=output, localize=localize))
    Printer(False, False, False, legalizing=True).summary(res)
    written = Path(res.report.output) if res.report.output else None
    made = overlay.node_data(model, res.report, written, localization=res.localization)
    return _written(folder, model, written, made)


app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]})


@app.command(help=HELP, no_args_is_help=True)
def view(
    model: Path = typer.Argument(..., metavar="MODEL", help="ONNX or TFLite model.", show_default=False),
    report: Optional[Path] = typer.Option(None, "--report", metavar="PATH", help="Show this finished run (its"
                                          " JSON report and the model it wrote) instead of running the job.",
                                          show_default=False),
    target: str = typer.Option(DEFAULT_TARGET, "--target", metavar="|".join(TARGETS), help="Legal form, when the job"
                               " runs."),
    localize: Optional[bool] = typer.Option(None, "--localize/--no-localize", help="Compare intermediate values"
                                            " (each value's error in the overlays); default: when the check"
                                            " fails.", show_default=False),
    port: int = typer.Option(8080, "--port", min=1, max=65535, help="The server's port."),
    host: str = typer.Option("localhost", "--host", help="The address the server listens on; one that is not"
                             " loopback needs --expose."),
    expose: bool = typer.Option(False, "--expose", help="Allow a --host that other machines reach. Whoever reaches"
                                " it with the printed address (its token) sees both models' graphs (node names,"
                                " shapes, attributes and constants' values as the page shows them) and the run's"
                                " overlays; the address and token cross the network in clear (plain HTTP)."),
    no_browser: bool = typer.Option(False, "--no-browser", help="Print the page's address; open no browser."),
) -> None:
    require()
    if not model.is_file():
        raise UsageError(f"{model}: no such file")
    _drawable(model)
    _port_free(host, port, *_bind(host, port, expose))
    with tempfile.TemporaryDirectory(prefix="legalize-view-") as d:
        folder = Path(d)
        if report is not None:
            models, overlays = _from_report(model, report, folder)
        else:
            models, overlays = _run_job(model, target, localize, folder)
        try:
            _serve(host, port, models, overlays, browser=not no_browser, expose=expose)
        except KeyboardInterrupt:
            print("legalize view: stopped", file=sys.stderr)
