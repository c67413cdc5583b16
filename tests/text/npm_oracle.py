"""The npm packages the text tests take as oracles (tests/text/oracle: tokenizers,
tests/text/jinja_oracle: @huggingface/jinja), each pinned by its folder's package-lock.json."""
import os
import shutil
import subprocess

import pytest


def install_or_skip(folder, package, what):
    """Installs `package` in `folder` with `npm ci` unless it is there; skips the calling test,
    saying why (`what` did not run), where node or npm is missing or the install fails."""
    if not shutil.which("npm") or not shutil.which("node"):
        pytest.skip("SKIPPED: npm or node is missing; %s did not run" % what)
    if not os.path.isdir(os.path.join(folder, "node_modules", *package.split("/"))):
        try:
            r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=folder, capture_output=True,
                               timeout=180)
        except subprocess.TimeoutExpired:
            pytest.skip("SKIPPED: npm ci (%s) took over 180 s (no registry?); %s did not run" % (package, what))
        if r.returncode != 0:
            pytest.skip("SKIPPED: npm could not install %s (no registry?): %s" % (package, r.stderr.decode()[-300:]))
