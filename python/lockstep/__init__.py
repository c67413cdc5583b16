"""lockstep: deterministic byte-level language models.

The classes that run and train a model in this process come from the compiled module
``lockstep._lockstep`` (built by CMake into ``<build>/python/lockstep/``)::

    import numpy as np, lockstep
    lm = lockstep.LanguageModelInference.from_checkpoint("/tmp/model")
    ids = np.frombuffer(b"Hello, wor", dtype=np.uint8).astype(np.int32).reshape(1, -1)
    print(lm.next_bytes(ids))

- ``LanguageModelConfig``: a model's dimensions and the layout of its flat parameters.
- ``LanguageModelInference``: logits (ragged ``lengths`` allowed), hidden states, loss,
  greedy next bytes, with a threaded and a reference path that give the same bits.
- ``LanguageModelHostTrainer``: one AdamW step at a time; ``save_model`` and
  ``save_checkpoint`` write its state for the command's readers.
- ``lockstep.lowbit``: q8-packed matrices (pack, read, expand exactly); import it explicitly.

``lockstep.client`` talks to ``lockstep serve`` over its Unix socket (docs/PROTOCOL.md), and
``lockstep.http_client`` to its HTTP API, retrying and resuming streams exactly across a
replica's death (docs/SCALING.md). This
package imports with the standard library alone; where the compiled module is not built (or not
on the path) the classes above are absent and the client still works.
"""

# The package may live in two folders: the pure-Python files in the source tree (python/) and
# the compiled module in the build tree (<build>/python/). With both on PYTHONPATH, this makes
# `lockstep._lockstep` findable in the second.
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

from . import client, http_client  # noqa: E402  (standard library only)
from .client import Client, ProtocolError, ServerError, ServerRefused, connect  # noqa: E402

__all__ = ["client", "http_client", "Client", "ProtocolError", "ServerError", "ServerRefused", "connect"]

try:
    from ._lockstep import (  # noqa: E402
        ChatTemplate,
        LanguageModelConfig,
        LanguageModelHostTrainer,
        LanguageModelInference,
        PROFILE,
        Session,
        TextStream,
        Tokenizer,
        default_thread_count,
        export_gguf,
        import_gguf,
        import_hf,
    )
except ImportError as _error:  # not built, or built for another Python
    #: Why the compiled classes are missing (None when they are present).
    extension_error = _error
else:
    extension_error = None
    __all__ += [
        "ChatTemplate",
        "LanguageModelConfig",
        "LanguageModelHostTrainer",
        "LanguageModelInference",
        "PROFILE",
        "Session",
        "TextStream",
        "Tokenizer",
        "default_thread_count",
        "export_gguf",
        "import_gguf",
        "import_hf",
    ]

__version__ = "0.1.0"
