"""ctest's python_eccl_torch: run_torch_tests.py BUILD_PYTHON_DIR TESTS_DIR

Runs the torch.distributed backend tests against the package built into
BUILD_PYTHON_DIR, with the interpreter CMake found (Debian's
/usr/bin/python3). Exits 77 (ctest: skipped) where they cannot run: pytest
or torch missing, or eccl._torch not built.
"""

import glob
import importlib.util
import os
import subprocess
import sys

SKIP = 77


def main():
    build_python, tests = sys.argv[1], sys.argv[2]
    for module, package in (("pytest", "python3-pytest"), ("torch", "python3-torch")):
        if importlib.util.find_spec(module) is None:
            print("python_eccl_torch: skipped: %s has no %s (apt-get install %s)" % (sys.executable, module, package))
            return SKIP
    if not glob.glob(os.path.join(build_python, "eccl", "_torch*.so")):
        print("python_eccl_torch: skipped: no eccl._torch in %s/eccl (not built: libtorch-dev missing?)"
              % build_python)
        return SKIP
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([build_python] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", tests] + sys.argv[3:]
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
