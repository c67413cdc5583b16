#!/usr/bin/env python3
"""Load a model and print the greedy next byte after "Hello, wor": the inference class's first
example.

    PYTHONPATH=python:build/python /usr/bin/python3 examples/python_example.py [MODEL]

MODEL is a model directory, a checkpoint (step directory or location) or a model.json file; by
default the fortunes model shipped beside this script (examples/models/fortunes), so it runs from
any directory. python/tests/test_examples.py runs it.
"""
import os
import sys

import numpy as np

import lockstep

HERE = os.path.dirname(os.path.abspath(__file__))
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "models", "fortunes")

lm = lockstep.LanguageModelInference.from_checkpoint(path)
ids = np.frombuffer(b"Hello, wor", dtype=np.uint8).astype(np.int32).reshape(1, -1)
next_ids = lm.next_bytes(ids)
print(next_ids)
