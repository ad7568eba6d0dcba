"""onnxruntime's QNN execution provider on Qualcomm's HTP backend: the judge of
``--target qnn-htp`` and the runtime of ``--provider qnn``.

    qnn_session(model, **options) -> an onnxruntime session on the HTP, CPU fallback off
    available() -> whether onnxruntime-qnn is installed (the ``qnn`` extra)

``onnxruntime-qnn`` is a plugin EP: its library is registered with onnxruntime
(``register_execution_provider_library``) and the session is given its device. Its HTP
backend (``libQnnHtp.so``) validates each node and, on x86, runs the graph in its
simulator. With ``session.disable_cpu_ep_fallback`` a node HTP refuses fails the session
("This session contains graph nodes that are assigned to the default CPU EP ...")
instead of running on the CPU unseen; the backend's own words for it are on stderr
(``QNN.backendValidateOpConfig() failed for node ... of type ... with error code ...``),
which ``refusals`` reads back out of a log.
"""

from __future__ import annotations

import re
from typing import List, Mapping, Optional

from ..errors import CheckUnavailable
from ..extras import install_hint

EP_NAME = "QNNExecutionProvider"
INSTALL_HINT = f"--provider qnn needs onnxruntime's QNN execution provider: {install_hint('qnn')}"
# The provider options every session gets: the HTP backend of one SoC, Snapdragon X Elite
# (SC8380XP, HTP v73: Windows-on-Arm laptops). Without a SoC named, the x86 simulator's
# default configuration fails the graph finalization of some graphs
# ("QNN_COMMON_ERROR_MEM_ALLOC": a rank-5 transpose, a lone Where, the corpus's ViT export)
# that it finalizes once a SoC is named (fp16 precision on or off; vtcm_mb,
# htp_performance_mode and htp_arch do not fix the ViT). A SoC named also turns on what the device does with a
# float32 model: its ops run at fp16 (enable_htp_fp16_precision, on by default).
HTP_OPTIONS = {"backend_type": "htp", "soc_model": "SC8380XP"}
_registered = False


def available() -> bool:
    try:
        import onnxruntime_qnn  # noqa: F401
    except ImportError:
        return False
    return True


def _device():
    """The QNN EP's device, its library registered once per process."""
    global _registered
    try:
        import onnxruntime_qnn
    except ImportError:
        raise CheckUnavailable(INSTALL_HINT) from None
    import onnxruntime as ort

    if not _registered:
        try:
            ort.register_execution_provider_library(EP_NAME, onnxruntime_qnn.get_library_path())
        except Exception as e:  # noqa: BLE001 - registered already (by another caller of this process)
            if "already" not in str(e).lower():
                raise CheckUnavailable(f"onnxruntime could not register the QNN execution provider:"
                                       f" {str(e).splitlines()[0]}") from None
        _registered = True
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    if not devices:
        raise CheckUnavailable("onnxruntime registered the QNN execution provider but it offers no device")
    return devices


def session_options(options: Optional[Mapping[str, str]] = None):
    """Session options with the QNN EP's HTP device and the CPU fallback off."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    opts.add_provider_for_devices(_device(), {**HTP_OPTIONS, **(options or {})})
    return opts


def qnn_session(model, options: Optional[Mapping[str, str]] = None, quiet: bool = False):
    """A session of ``model`` (serialized bytes or a path) on HTP; the session's error
    when a node is refused (its reasons are what the backend logged)."""
    import onnxruntime as ort

    opts = session_options(options)
    if quiet:
        opts.log_severity_level = 3
    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), opts)


_VALIDATE = re.compile(r"backendValidateOpConfig\(\) failed for node `([^`]*)` of type `([^`]*)` with error code (\d+)")
_LINE = re.compile(r"\[[WE]:onnxruntime:[^\]]*\] (.*)")
# lines every session logs, which say nothing about the model
_NOISE = ("File mapped weights", "EPContext encryption", "LIBNATIVE")


def refusals(log: str) -> List[dict]:
    """The nodes the backend refused, in its words, from a session's log:
    ``{"node", "qnn_op", "code", "message"}``."""
    return [{"node": m.group(1), "qnn_op": m.group(2), "code": int(m.group(3)),
             "message": f"QNN.{m.group(0)}"} for m in _VALIDATE.finditer(log)]


def log_errors(log: str) -> List[str]:
    """The warning and error lines of a session's log, less those every session logs."""
    return [m.group(1).strip() for m in _LINE.finditer(log) if not any(n in m.group(1) for n in _NOISE)]


_UNSUPPORTED = re.compile(r"\{ name: ([^,]*), type: ([^ ]*) \}")


def placement(model, feeds=None, options: Optional[Mapping[str, str]] = None) -> dict:
    """Whether HTP takes ``model`` (bytes or a path) whole, CPU fallback off: ``{"whole",
    "refused": [{"node", "op"}], "reasons": [the backend's lines], "error", "outputs"}``.
    The nodes the EP does not place are those its log names ("Unsupported nodes in QNN
    EP: { name: ..., type: ... }"), the backend's reasons its validation lines. With
    ``feeds``, a model taken whole is run and its outputs returned. In this process: the
    log is read from its stderr (file descriptor 2) while the session is made."""
    import os
    import tempfile

    out = {"whole": False, "refused": [], "reasons": [], "error": None, "outputs": None}
    with tempfile.TemporaryFile() as log:
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            sess = qnn_session(model, options)
            out["whole"] = True
        except Exception as e:  # noqa: BLE001 - the session's refusal is the finding
            sess, out["error"] = None, str(e).strip().splitlines()[0]
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        text = log.read().decode(errors="replace")
    seen = set()
    for m in _UNSUPPORTED.finditer(text):
        if m.group(1) not in seen:
            seen.add(m.group(1))
            out["refused"].append({"node": m.group(1), "op": m.group(2)})
    out["reasons"] = list(dict.fromkeys(r["message"] for r in refusals(text)))
    if sess is not None and feeds is not None:
        out["outputs"] = sess.run(None, feeds)
    return out
