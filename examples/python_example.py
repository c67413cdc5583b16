#!/usr/bin/env python3
"""Document 003's example under lockstep's names, as written: it loads "model.json" from the
current directory, so run it inside a model directory, with the package on the path:

    cd /tmp/model && PYTHONPATH=$REPO/python:$REPO/build/python python3 $REPO/examples/python_example.py

It prints the greedy next byte after "Hello, wor" (python/tests/test_examples.py runs it).
"""
import numpy as np, lockstep
lm = lockstep.LanguageModelInference.from_checkpoint("model.json")
ids = np.frombuffer(b"Hello, wor", dtype=np.uint8).astype(np.int32).reshape(1, -1)
next_ids = lm.next_bytes(ids)
print(next_ids)
