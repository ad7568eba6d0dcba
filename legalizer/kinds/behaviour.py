"""What the main job asks of a model of one input kind, as one object: ``Format``. Each
kind (ONNX, TFLite, TOSA MLIR, ``.pt2``) has a subclass in its package
(``kinds/<kind>/format.py``), named by its record (``Kind.formats``); the driver asks
``formats.format_of`` and never compares format names."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import UsageError
from ..model import Model

if TYPE_CHECKING:
    from ..numeric.golden import Golden
    from ..numeric.settings import CheckSettings


@dataclass(frozen=True)
class Subject:
    """What a check or a comparison (``Format.check``, ``sides``, ``compare``) reads of a
    run, as values: the input file and its model (legalized, for the check), the
    settings, the bindings and what the stages before made for it."""

    path: Path  # the input file
    model: Model
    settings: "CheckSettings"  # ``RunOptions.check_settings``
    dims: Mapping[str, int] = field(default_factory=dict)  # the dims the user binds (or a static target bound)
    given: Mapping[str, Any] = field(default_factory=dict)  # the arrays the check is fed (--input)
    golden: Optional["Golden"] = None  # stored inputs and outputs (--load-*)
    constraints: Sequence = ()  # the input's runtime constraints: the sizes the check's search tries
    profile: str = "mlir"  # the target's verifier profile: the runtime shapes are verified under it
    onnx_form: Any = None  # a TFLite model's legalized ONNX-op form (``emit_formats.OnnxForm``), where made
    reference: Optional[Model] = None  # --against's model, as read for its output names


@dataclass
class Sides:
    """What a check compared: the candidate and its reference, as the check ran them,
    and the candidate's format, which knows how to localize and reduce them. ONNX sides
    are ModelProtos or paths, TFLite sides paths (``graph`` the candidate's IR), a TOSA
    MLIR candidate a path and its reference a ``.tflite`` or ``.onnx`` path."""

    fmt: "Format"
    candidate: Any
    reference: Any
    graph: Any = None


class Format:
    """One input kind. The class attributes are its facts; the methods what differs
    between kinds, each with the refusal a kind without it gives."""

    name = ""  # as the report's ``format`` names it
    title = ""  # in messages
    written: Optional[str] = None  # the format its legal form is written in; None: verified only
    input_profile = "mlir"  # the verifier profile its input is held to by default
    runtime = "onnxrt"  # the runtime its check's runs come from (golden data's runner names)
    golden = False  # stored inputs and outputs (--load-*, --save-*) feed its check
    reduces = False  # --reduce writes its subgraphs
    static_shapes = False  # --static makes its shapes static
    static_for_target = False  # a target that takes static shapes specializes it (--dim's sizes, else 1)
    against: Tuple[str, ...] = ()  # the reference formats --against compares it with
    unpickled = False  # its files may hold pickles: --trust-pt2 loads them with torch's unsafe unpickling
    runs_as_file = True  # a runtime runs its file as it is (a .pt2 is loaded: its ONNX export, and PyTorch)

    # -- the inputs the user binds --------------------------------------------------
    def declared(self, model: Model):
        """``numeric.user_inputs.Declared``: each input the user's shapes and arrays may name."""
        raise NotImplementedError

    def input_types(self, model: Model) -> Dict[str, int]:
        """The ONNX element type of each declared input (0 where unknown)."""
        raise NotImplementedError

    def dim_keys(self, model: Model) -> Optional[List[str]]:
        """The dynamic dims a ``--dim`` may bind; None where the dims are another model's."""
        from ..numeric.user_inputs import dynamic_keys

        return dynamic_keys(self.declared(model))

    def user_dims(self, model: Model, dims: Mapping[str, int], input_shapes: Mapping[str, tuple],
                  given) -> Dict[str, int]:
        """The dims the user binds (``--dim``, ``--input-shape``, ``--input``), checked
        against the model's inputs (UsageError)."""
        from ..numeric.user_inputs import check_dtypes, user_dims

        bound = user_dims(self.declared(model), dims, input_shapes, given, self.dim_keys(model))
        check_dtypes(self.input_types(model), given)
        return bound

    def default_output(self, path: Path, model: Model) -> Path:
        from .paths import default_output

        return default_output(path)

    def stage(self, model: Model, path: Path, *, force: bool = False):
        """A context that writes ``model`` in its own format under a temporary name beside
        ``path`` and yields an ``atomic_files.Staged``: committed if accepted, else removed."""
        raise UsageError(f"a {self.title} model is verified, not written")

    def specialize(self, model: Model, path: Path, dims: Mapping[str, int]) -> Tuple[Dict[str, int], Optional[str]]:
        """Shapes made static (a static-shape target's, ``--static``): the dims the check
        then binds, and the line that says what was made static (None: no dim was)."""
        return dict(dims), None

    # -- the checks -------------------------------------------------------------------
    def check(self, subject: Subject, written: Path):
        """The main job's check of ``written`` (the legalized model) against the input."""
        raise UsageError(f"a {self.title} model is not legalized, so not checked")

    def sides(self, subject: Subject, written: Path) -> Sides:
        """What ``numeric`` compared, for localization and reduction."""
        raise NotImplementedError

    def compare(self, subject: Subject, reference: Path):
        """``--against``: the model at ``subject.path`` compared with ``reference``."""
        raise NotImplementedError

    # -- after a check that failed ----------------------------------------------------
    def feeds(self, sides: Sides, dims: Mapping[str, int], given, provider: str):
        """The inputs the check fed at ``dims`` (the same synthesis, the same seed)."""
        raise NotImplementedError

    def localize(self, sides: Sides, binding, given, settings, *, budget: int):
        """Where the candidate starts to differ at ``binding`` (``numeric.localize``), as
        ``settings`` (``numeric.settings.CheckSettings``) say."""
        raise NotImplementedError

    def reduce(self, sides: Sides, loc, path: Path, given, settings, *, force: bool, protect: Sequence[Path]):
        raise UsageError(f"--reduce writes ONNX or TOSA MLIR subgraphs: a {self.title} model is localized,"
                         " not reduced")

    def reduce_violation(self, model: Model, source: Path, code: str, node: str, profile: str, path: Path, *,
                         force: bool, protect: Sequence[Path]):
        raise UsageError(f"--reduce writes ONNX or TOSA MLIR subgraphs: a {self.title} model is not reduced")
