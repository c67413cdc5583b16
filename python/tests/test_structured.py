"""Structured output from Python: generate(..., grammar=..., json_schema=...) gives the text
`lockstep generate --grammar / --json-schema` prints for the same options, valid JSON of the
schema (Debian's python3-jsonschema); refusals are ValueErrors naming the place."""
import json
import os
import subprocess

import jsonschema
import pytest

from conftest import BINARY, REPO

FORTUNES = os.path.join(REPO, "examples", "models", "fortunes")
SCHEMA = {"type": "object", "properties": {"word": {"type": "string", "maxLength": 10}, "n": {"type": "integer"}},
          "required": ["word", "n"], "additionalProperties": False}


def test_json_schema_equals_the_command(extension, tmp_path):
    lm = extension.LanguageModelInference.from_checkpoint(FORTUNES)
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    for seed in (1, 2, 3):
        text = lm.generate("A: ", 300, temperature=1.0, seed=seed, json_schema=SCHEMA)
        jsonschema.validate(json.loads(text), SCHEMA)
        assert lm.generate("A: ", 300, temperature=1.0, seed=seed, json_schema=json.dumps(SCHEMA)) == text
        r = subprocess.run([BINARY, "generate", FORTUNES, "--prompt", "A: ", "-n", "300", "--temperature", "1",
                            "--seed", str(seed), "--json-schema", str(path)], capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.decode() == "A: " + text + "\n"


def test_grammar_and_refusals(extension):
    lm = extension.LanguageModelInference.from_checkpoint(FORTUNES)
    text = lm.generate("Q: ", 50, temperature=1.0, seed=4, grammar='root ::= ("yes" | "no") "."\n')
    assert text in ("yes.", "no.")
    with pytest.raises(ValueError, match="line 1, column 14"):
        lm.generate("Q: ", 5, grammar='root ::= "a" )\n')
    with pytest.raises(ValueError, match="'minimum' is not supported"):
        lm.generate("Q: ", 5, json_schema={"type": "integer", "minimum": 1})
    with pytest.raises(ValueError, match="not both"):
        lm.generate("Q: ", 5, grammar="root ::= \"a\"\n", json_schema={})
