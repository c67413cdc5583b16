"""The tokenizer.json tests: hf_styles and hf_corpus beside them, and (for `lockstep import hf`)
python/tests' checkpoint maker, which reads BINARY from here as from its own conftest."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BINARY = os.environ.get("LOCKSTEP_BINARY", os.path.join(REPO, "build", "src", "lockstep"))
sys.path.insert(0, HERE)
sys.path.append(os.path.join(REPO, "python", "tests"))
