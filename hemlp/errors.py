"""Typed exceptions. Every message names the problem and the fix."""


class HemlpError(Exception):
    """Base class of every error hemlp raises on purpose."""


class ParameterError(HemlpError, ValueError):
    """Invalid or inconsistent encryption parameters."""


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


class UnsupportedError(HemlpError, NotImplementedError):
    """An operation or model construct hemlp does not support (yet)."""


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


class InsecureParametersWarning(UserWarning):
    """Emitted whenever a context below 128-bit security is built (tests only)."""


class UnsafeDecryptionWarning(UserWarning):
    """Emitted when decryption adds no noise (noise="none"): the output then reveals the secret key to anyone who
    also holds the ciphertext (Li–Micciancio). For tests and precision measurements only."""
