"""Typed exceptions. Every message names the problem and the fix."""
import sys
import warnings


class HemlpError(Exception):
    """Base class of every error hemlp raises on purpose."""


class ParameterError(HemlpError, ValueError):
    """Invalid or inconsistent encryption parameters."""


class OptionError(ParameterError, TypeError):
    """An option that does not apply: an unknown name, or an option of another runtime or layout (a Ray option with
    runtime="local"); the message names the valid ones. A TypeError too, as for an unexpected keyword argument."""


class InsecureParametersError(ParameterError):
    """A parameter set below 128-bit security was requested without opting in."""


class ContextMismatchError(HemlpError, ValueError):
    """Objects from different parameter sets / contexts were combined."""


class KeyMismatchError(HemlpError, ValueError):
    """A key does not belong to this context or to the operation's secret."""


class MissingKeyError(HemlpError, KeyError):
    """A needed evaluation key (relinearisation, rotation, conjugation, conversion) was not given."""

    def __str__(self):  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class MissingKeyFileError(MissingKeyError):
    """A staged key file (RayOptions.shared_keys=StagedKeys(folder): the driver ships only the file's name) is not in
    that folder on the machine that runs a task; the message names the file and the two fixes: copy it into the same
    folder on every node, or run with the default shared_keys, which ships the key bytes."""


class LevelError(HemlpError, ValueError):
    """Levels exhausted, or operands at different levels."""


class ScaleMismatchError(HemlpError, ValueError):
    """Operands with different scales were combined."""


class EncodingError(HemlpError, ValueError):
    """Values cannot be encoded (too large for the scale, too many, wrong dtype)."""


class ShapeError(HemlpError, ValueError):
    """Matrix or tensor shapes do not fit the operation."""


class SerializationError(HemlpError, ValueError):
    """Bytes are truncated, corrupted, of another type/version, or from another context."""


class ReadOnlyKeyError(HemlpError, ValueError):
    """A write into an evaluation key opened from a shared key file (hemlp.runtime.shared_keys): its pages are mapped
    read-only and shared by every process on the machine; load an owned copy (EvalKeys.load) to change a key."""


class UnsupportedError(HemlpError, NotImplementedError):
    """An operation or model construct hemlp does not support (yet)."""


class UnsupportedOpError(UnsupportedError):
    """A lowered step op that a layout (or a pass) cannot run, or that is no step op at all: ``op`` the op, ``layout``
    the layout or pass that refused it, ``alternative`` what runs it instead (None when nothing does)."""

    def __init__(self, message: str, op: str | None = None, layout: str | None = None,
                 alternative: str | None = None):
        super().__init__(message)
        self.op, self.layout, self.alternative = op, layout, alternative


class MissingDependencyError(HemlpError, ImportError):
    """An optional package a feature needs is not installed; the message names the extra that installs it."""


class DeviceError(HemlpError, RuntimeError):
    """The GPU backend cannot do what was asked: no CUDA device, its library not built, a CUDA failure or device
    memory exhausted; the message names the fix (hemlp.gpu)."""


class ClientArtefactError(HemlpError, RuntimeError):
    """A client artefact (a compiled model saved with client=True: no weights) was asked to do the server's work."""


class CalibrationError(HemlpError, ValueError):
    """Calibration data are missing, of the wrong shape, non-finite or degenerate (e.g. all zeros) where the
    model's activations need ranges calibrated on representative inputs."""


class InputRangeError(EncodingError):
    """Client side: inputs drive an activation beyond the polynomial's calibrated domain, where it diverges
    (the decryption would be garbage); raised before encrypting."""


class TargetUnreachableError(HemlpError, ValueError):
    """No activation approximation within the available depth reaches the requested agreement target."""


class ResourceError(HemlpError, MemoryError):
    """The plan's estimated server memory exceeds the memory budget (server_memory): raised at compile time, before
    any key or ciphertext exists."""


class InsecureParametersWarning(UserWarning):
    """Emitted whenever a context below 128-bit security is built (tests only)."""


class UnsafeDecryptionWarning(UserWarning):
    """Emitted when decryption adds no noise (noise="none"): the output then reveals the secret key to anyone who
    also holds the ciphertext (Li–Micciancio). For tests and precision measurements only."""


def warn_always(message, category=UserWarning, stacklevel: int = 1) -> None:
    """``warnings.warn(message, category, stacklevel)`` without Python's once-per-location deduplication: every call
    is shown (the loud warnings: insecure parameters, activation ranges, calibration), while the host program's own
    filters (``warnings.simplefilter("ignore", ...)``, ``-W``, pytest's ``filterwarnings``) still decide. It touches no
    global filter: ``warnings.warn_explicit`` with ``registry=None`` checks against a fresh registry on every call.
    stacklevel counts as in ``warnings.warn`` (1: the line that calls warn_always)."""
    try:
        frame = sys._getframe(stacklevel)
    except ValueError:                       # fewer frames than stacklevel: what warnings.warn does
        glob, filename, lineno = sys.__dict__, "sys", 1
    else:
        glob, filename, lineno = frame.f_globals, frame.f_code.co_filename, frame.f_lineno
    # no module_globals: like warnings.warn, the source line is read from the file (a __main__ run with -c has a
    # loader that cannot give its source and would make warn_explicit raise)
    warnings.warn_explicit(message, category, filename, lineno, module=glob.get("__name__", "<string>"),
                           registry=None)


#: what ``from hemlp.errors import *`` (hemlp/__init__.py) re-exports: the exception and warning classes only, not
#: warn_always (library-internal) or this module's imports
__all__ = [name for name, obj in list(globals().items())
           if isinstance(obj, type) and issubclass(obj, (Exception, Warning))]
