"""docnmt: document-level neural machine translation in one modern PyTorch codebase.

Python API::

    import docnmt
    translator = docnmt.load("models/doc2doc")
    docs, report = translator.translate([["First sentence.", "Second sentence."]])
"""
__version__ = "0.1.0"

from .document import Document  # noqa: E402
from .errors import ConfigError, DataError, DocnmtError  # noqa: E402


def load(model_dir, weights=None, device=None):
    """Load a trained model directory; returns a :class:`docnmt.translate.Translator`."""
    from .translate import load as _load
    return _load(model_dir, weights, device)


__all__ = ["Document", "DataError", "ConfigError", "DocnmtError", "load", "__version__"]
