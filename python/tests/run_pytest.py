"""ctest's python_eccl: run_pytest.py BUILD_PYTHON_DIR TESTS_DIR

Runs the pytest suite against the package built into BUILD_PYTHON_DIR
(PYTHONPATH), with the interpreter CMake found (Debian's /usr/bin/python3).
Exits 77, which ctest reports as skipped, where the suite cannot run: pytest
or numpy missing, or the extension module not built.
"""

import glob
import importlib.util
import os
import subprocess
import sys

SKIP = 77


def main():
    build_python, tests = sys.argv[1], sys.argv[2]
    for module in ("pytest", "numpy"):
        if importlib.util.find_spec(module) is None:
            print("python_eccl: skipped: %s has no %s (apt-get install python3-%s)"
                  % (sys.executable, module, module))
            return SKIP
    if not glob.glob(os.path.join(build_python, "eccl", "_eccl*.so")):
        print("python_eccl: skipped: no extension module in %s/eccl (not built)" % build_python)
        return SKIP
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([build_python] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    # No .pytest_cache in the source tree; bytecode of the tests neither.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", tests] + sys.argv[3:]
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
