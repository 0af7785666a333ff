"""ctest's Python suites: run_pytest.py NAME BUILD_PYTHON_DIR TESTS_DIR EXTENSION MODULE...

Runs the pytest suite in TESTS_DIR against the package built into
BUILD_PYTHON_DIR (PYTHONPATH), with the interpreter CMake found (Debian's
/usr/bin/python3). Exits 77, which ctest reports as skipped, where the
suite cannot run: one of the Python MODULEs it needs missing (pytest, numpy,
torch: Debian's python3-MODULE), or the extension module eccl.EXTENSION not
built. NAME is the ctest name, for the message.
"""

import glob
import importlib.util
import os
import subprocess
import sys

SKIP = 77


def main():
    name, build_python, tests, extension = sys.argv[1:5]
    for module in sys.argv[5:]:
        if importlib.util.find_spec(module) is None:
            print("%s: skipped: %s has no %s (apt-get install python3-%s)" % (name, sys.executable, module, module))
            return SKIP
    if not glob.glob(os.path.join(build_python, "eccl", extension + "*.so")):
        print("%s: skipped: no eccl.%s in %s/eccl (not built)" % (name, extension, build_python))
        return SKIP
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([build_python] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    # No .pytest_cache in the source tree; bytecode of the tests neither.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", tests]
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
