#!/usr/bin/python3
"""Check that each layer of the library includes only what is below it (docs/ARCHITECTURE.md).

    /usr/bin/python3 tools/check_layers.py [--root DIR]
    /usr/bin/python3 tools/check_layers.py --self-test

Reads every `#include "..."` of src/, include/lockstep/ and python/src/, finds the header it
names (beside the including file, then under src/, then under include/, as the build's include
paths do) and the layers of both files, and prints one line for each include its layer may not
make:

    FILE:LINE: <layer> includes <header> of layer <other>

A file in a folder of no layer, a public header of no layer, and an include that names no file of
the tree are errors too, so that new code has to be placed. Exit status 1 when anything is
printed, else 0. `--root` is the tree to check (default: this script's repository).

`--self-test` checks the checker: it copies src/, include/ and python/src/ to a temporary
directory, checks the copy (which must pass), appends `#include "model/model_impl.hpp"` to a file
under src/kernels/simd/, and passes only if the check then fails naming that file.

Standard library only.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# The layers from the bottom up, each with the layers it may include besides itself. Keep this
# and the table in docs/ARCHITECTURE.md ("Layers") the same.
#   kernels/ref is the oracle; kernels/simd (and kernels/cuda, to come) may read it, never the
#   other way round.
#   api and cli see the library through its public headers alone (PUBLIC_ONLY).
BELOW_MODEL = ["core", "quant", "kernels/ref", "kernels/simd", "kernels/cuda", "format", "text", "grammar"]
LIBRARY = BELOW_MODEL + ["model", "interop", "train", "serve"]
MAY_INCLUDE = {
    "core": [],
    "quant": ["core"],
    "kernels/ref": ["core", "quant"],
    "kernels/simd": ["core", "quant", "kernels/ref"],
    "kernels/cuda": ["core", "quant", "kernels/ref"],
    "format": ["core", "quant"],
    "text": ["core", "format"],
    "grammar": ["core", "format", "text"],
    "model": BELOW_MODEL,
    "interop": BELOW_MODEL + ["model"],
    "train": BELOW_MODEL + ["model"],
    "serve": BELOW_MODEL + ["model"],
    "api": LIBRARY,
    "cli": LIBRARY,
    "python": LIBRARY,
}
PUBLIC_ONLY = {"api", "cli"}

# The folders of each layer (a file belongs to the longest folder that holds it).
FOLDERS = {
    "src/core": "core",
    "src/quant": "quant",
    "src/kernels/ref": "kernels/ref",
    "src/kernels/simd": "kernels/simd",
    "src/kernels/cuda": "kernels/cuda",
    "src/format": "format",
    "src/text": "text",
    "src/grammar": "grammar",
    "src/model": "model",
    "src/interop": "interop",
    "src/train": "train",  # train/mpi/ included
    "src/serve": "serve",
    "src/api": "api",
    "src/cli": "cli",
    "python/src": "python",
}

# The public headers (include/lockstep/) and the layer each belongs to: the layer that implements
# it, whose files may include it, and whose rules its own includes follow.
PUBLIC_HEADERS = {
    "error.hpp": "core",
    "os_error.hpp": "core",
    "config.hpp": "format",
    "format.hpp": "format",
    "tokenizer.hpp": "text",
    "chat_template.hpp": "text",
    "grammar.hpp": "grammar",
    "model.hpp": "model",
    "session.hpp": "model",
    "sampling.hpp": "model",
    "generator.hpp": "model",
    "call.hpp": "model",
    "prefix_cache.hpp": "model",
    "kv_pool.hpp": "model",
    "interop.hpp": "interop",
    "trainer.hpp": "train",
    "training_run.hpp": "train",
    "export.hpp": "train",
    "server.hpp": "serve",
    "lockstep.h": "api",
}

# Files that hold no code of a layer.
NOT_CODE = {"src/CMakeLists.txt"}
SOURCE_SUFFIXES = (".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh", ".inl")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layer_of(rel):
    """The layer of a file (path relative to the root, with '/'), or None."""
    if rel.startswith("include/"):
        name = rel[len("include/lockstep/"):] if rel.startswith("include/lockstep/") else None
        return PUBLIC_HEADERS.get(name) if name and "/" not in name else None
    best = None
    for folder, layer in FOLDERS.items():
        if rel.startswith(folder + "/") and (best is None or len(folder) > len(best[0])):
            best = (folder, layer)
    return best[1] if best else None


def tree_files(root):
    """Every file of src/, include/ and python/src/, relative to root, sorted."""
    out = []
    for top in ("src", "include", "python/src"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(filenames):
                out.append(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    return out


def resolve(root, including, header):
    """The file (relative to root) that `#include "header"` in `including` names, or None."""
    for base in (os.path.dirname(including), "src", "include"):
        candidate = os.path.normpath(os.path.join(base, header)).replace(os.sep, "/")
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate
    return None


def check(root):
    """The violations in the tree at root, as printable lines; and the counts checked."""
    problems = []
    files = includes = 0
    for rel in tree_files(root):
        if rel in NOT_CODE:
            continue
        layer = layer_of(rel)
        if layer is None:
            if rel.startswith("include/"):
                problems.append(f"{rel}: a public header of no layer (add it to PUBLIC_HEADERS in "
                                "tools/check_layers.py and to docs/ARCHITECTURE.md)")
            else:
                problems.append(f"{rel}: in {os.path.dirname(rel)}/, a folder of no layer (add it to "
                                "FOLDERS in tools/check_layers.py and to docs/ARCHITECTURE.md)")
            continue
        if not rel.endswith(SOURCE_SUFFIXES):
            continue
        files += 1
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                includes += 1
                header = m.group(1)
                target = resolve(root, rel, header)
                where = f"{rel}:{number}: {layer} includes {header}"
                if target is None:
                    problems.append(f"{where}, which is no file of src/, include/ or {os.path.dirname(rel)}/")
                    continue
                other = layer_of(target)
                if other is None:
                    problems.append(f"{where} of no layer ({target})")
                elif other == layer:
                    continue
                elif other not in MAY_INCLUDE[layer]:
                    problems.append(f"{where} of layer {other}")
                elif layer in PUBLIC_ONLY and not target.startswith("include/"):
                    problems.append(f"{where} of layer {other} ({layer} includes public headers only)")
    return problems, files, includes


def self_test(root):
    """Checks the checker on a copy of the tree with one kernel including the model."""
    with tempfile.TemporaryDirectory(prefix="check_layers.") as tmp:
        for top in ("src", "include", "python/src"):
            shutil.copytree(os.path.join(root, top), os.path.join(tmp, top))
        script = os.path.abspath(__file__)
        run = lambda: subprocess.run([sys.executable, script, "--root", tmp],  # noqa: E731
                                     capture_output=True, text=True)
        clean = run()
        if clean.returncode != 0:
            print("self-test: the copy fails before any change:\n" + clean.stdout + clean.stderr)
            return 1
        simd = sorted(n for n in os.listdir(os.path.join(tmp, "src/kernels/simd")) if n.endswith(".cpp"))
        victim = "src/kernels/simd/" + simd[0]
        with open(os.path.join(tmp, victim), "a", encoding="utf-8") as f:
            f.write('\n#include "model/model_impl.hpp"\n')
        broken = run()
        expected = f"{victim}:"
        named = [line for line in broken.stdout.splitlines()
                 if line.startswith(expected) and "kernels/simd includes model/model_impl.hpp of layer model" in line]
        if broken.returncode != 1 or not named:
            print(f"self-test: {victim} includes model/model_impl.hpp, but the check "
                  f"(status {broken.returncode}) did not say so:\n" + broken.stdout + broken.stderr)
            return 1
        print(f"self-test: the check refuses the violation: {named[0]}")
        return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--root", default=here, help="the tree to check (default: %(default)s)")
    parser.add_argument("--self-test", action="store_true",
                        help="check that a kernel including the model is refused, on a copy of --root")
    args = parser.parse_args()
    if args.self_test:
        return self_test(args.root)
    for top in ("src", "include/lockstep"):
        if not os.path.isdir(os.path.join(args.root, top)):
            print(f"check_layers: {args.root} has no {top}/")
            return 1
    problems, files, includes = check(args.root)
    for line in problems:
        print(line)
    if problems:
        print(f"check_layers: {len(problems)} problems in {files} files (docs/ARCHITECTURE.md, \"Layers\")")
        return 1
    print(f"check_layers: {files} files, {includes} includes, each allowed by its layer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
