"""assay: memory-lean fine-tuning of Llama-family models, with gates that qualify every claim."""

from importlib.metadata import PackageNotFoundError, version

from assay.errors import AssayError
from assay.model import Decoder, ModelConfig, load

try:
    __version__ = version("assay")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["AssayError", "Decoder", "ModelConfig", "__version__", "load"]
