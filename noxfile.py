"""Development sessions: ``nox -s tests | tests_all_devices | lint | docs | bench``.

One test session per CPU OpenCL runtime, each selecting it with ``FUSELOOP_DEVICE``:
``tests_pocl_pip`` (pip's PoCL 3.0), ``tests_intel_cpu`` (Intel's CPU runtime from pip,
``fuseloop[intel-cpu]``) and ``tests_pocl_system`` (the system's PoCL, on Debian
``apt-get install pocl-opencl-icd``).

Every session runs in a fresh virtual environment made with the interpreter that runs nox
(no fixed Python version). Extra arguments after ``--`` go to the underlying command, e.g.
``nox -s tests -- -k cache -x`` or ``nox -s bench -- --quick``.
"""

import os
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["lint", "tests", "docs"]


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite on the CPU (PoCL)."""
    session.install(".[test]")
    session.run("python", "-m", "pytest", "-q", "tests", *session.posargs,
                env={"FUSELOOP_DEVICE": "cpu"})


@nox.session
def tests_cuda(session: nox.Session) -> None:
    """Run the test suite on the first CUDA device (the CUDA backend, through CuPy)."""
    session.install(".[test,cuda]")
    session.run("python", "-m", "pytest", "-q", "tests", *session.posargs,
                env={"FUSELOOP_DEVICE": "cuda:0"})


@nox.session
def mpi(session: nox.Session) -> None:
    """The MPI simulation (tests/test_mpi.py): three ranks on this machine's CPU."""
    session.install(".[test,mpi]")
    session.run("python", "-m", "pytest", "-q", "tests/test_mpi.py", *session.posargs)


@nox.session
def tests_all_devices(session: nox.Session) -> None:
    """Run the test suite parametrised over every OpenCL device present."""
    session.install(".[test]")
    session.run("python", "-m", "pytest", "-q", "tests", *session.posargs,
                env={"FUSELOOP_TEST_ALL_DEVICES": "1"})


@nox.session
def tests_pocl_pip(session: nox.Session) -> None:
    """The test suite on pip's PoCL (pocl-binary-distribution) alone."""
    session.install(".[test]")
    # an empty vendor directory hides the system's ICDs; the loader still reads
    # pyopencl/.libs, where pip's PoCL registers itself
    vendors = Path(session.create_tmp()) / "no-system-icds"
    vendors.mkdir(exist_ok=True)
    session.run("python", "-m", "pytest", "-q", "tests", *session.posargs,
                env={"FUSELOOP_DEVICE": "pocl", "OCL_ICD_VENDORS": str(vendors)})


@nox.session
def tests_intel_cpu(session: nox.Session) -> None:
    """The test suite on Intel's CPU OpenCL runtime from pip (``fuseloop[intel-cpu]``)."""
    session.install(".[test,intel-cpu]")
    session.run("python", "-m", "fuseloop.cli", "devices", env={"FUSELOOP_DEVICE": "intel"})
    session.run("python", "-m", "pytest", "-q", "tests", *session.posargs,
                env={"FUSELOOP_DEVICE": "intel"})


@nox.session
def tests_pocl_system(session: nox.Session) -> None:
    """The test suite on the system's PoCL (Debian: ``apt-get install pocl-opencl-icd``)."""
    vendor_dir = Path(os.environ.get("OPENCL_VENDOR_PATH") or "/etc/OpenCL/vendors")
    if not any(vendor_dir.glob("*pocl*.icd")):
        session.error(f"no PoCL is registered in {vendor_dir}; on Debian or Ubuntu: "
                      "apt-get install pocl-opencl-icd")
    session.install(".[test]")
    # without pip's PoCL (it registers itself in pyopencl/.libs) 'pocl' names the system's
    session.run("python", "-m", "pip", "uninstall", "-y", "-q", "pocl-binary-distribution")
    session.run("python", "-m", "fuseloop.cli", "devices", env={"FUSELOOP_DEVICE": "pocl"})
    session.run("python", "-m", "pytest", "-q", "tests", *session.posargs,
                env={"FUSELOOP_DEVICE": "pocl"})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check over the package, tests, examples, benchmarks and this file; mypy over
    the package (settings: ``[tool.mypy]`` in pyproject.toml); the line budget."""
    # the package's own dependencies carry the types mypy reads (loopy, pyopencl, ...)
    session.install(".", "ruff==0.17.6", "mypy==2.4.1")
    session.run("ruff", "check", "fuseloop", "tests", "examples", "benchmarks", "docs",
                "noxfile.py", *session.posargs)
    session.run("mypy")
    session.run("python", ".ci/line_budget.py", "fuseloop")


@nox.session
def docs(session: nox.Session) -> None:
    """Run every example and every README/docs code block that starts with ``import``."""
    session.install(".")
    session.run("python", "docs/check_docs.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmark suite on the default device (``fuseloop bench``; options after ``--``)."""
    session.install(".[bench]")
    session.run("python", "benchmarks/run_suite.py", *session.posargs)


# data-apis/array-api-tests at a pinned commit (2026-04-03) and the commit of its spec
# submodule (data-apis/array-api) that it names; nothing of the suite is kept in this repository
ARRAY_API_TESTS_URL = "https://github.com/data-apis/array-api-tests"
ARRAY_API_TESTS_COMMIT = "55fcc60179efa2680ddd6cd926ddf17b83530e2b"
ARRAY_API_VERSION = "2024.12"  # fuseloop's __array_api_version__


@nox.session
def array_api(session: nox.Session) -> None:
    """The Array API test suite against ``fuseloop``, complex dtypes and ``fft`` included.

    Clones data-apis/array-api-tests at ``ARRAY_API_TESTS_COMMIT`` (with its spec
    submodule) into the session's temporary directory and runs it with
    ``--max-examples=10``.  Arguments after ``--`` go to pytest, e.g.
    ``nox -s array_api -- array_api_tests/test_fft.py``.  The reference count:
    ``ARRAY_API_TESTS_MODULE=array_api_strict nox -s array_api`` runs the same suite,
    with the same options, against array-api-strict.
    """
    module = os.environ.get("ARRAY_API_TESTS_MODULE", "fuseloop")
    session.install(".", "pytest", "pytest-json-report", "hypothesis>=6.151", "ndindex>=1.8",
                    *(["array-api-strict"] if module == "array_api_strict" else []))
    suite = Path(session.create_tmp()) / "array-api-tests"
    if not (suite / ".git").exists():
        session.run("git", "clone", "-q", ARRAY_API_TESTS_URL, str(suite), external=True)
    session.run("git", "-C", str(suite), "checkout", "-q", ARRAY_API_TESTS_COMMIT,
                external=True)
    session.run("git", "-C", str(suite), "submodule", "update", "--init", "-q", external=True)
    session.chdir(suite)
    targets = session.posargs or ["array_api_tests"]
    # --disable-deadline: the first call of each new kernel structure compiles it (about a
    # second on PoCL), past hypothesis's 800 ms deadline; that is no API failure
    session.run("python", "-m", "pytest", *targets, "--max-examples=10", "-q",
                "--disable-deadline", "--continue-on-collection-errors",
                env={"ARRAY_API_TESTS_MODULE": module,
                     "ARRAY_API_TESTS_VERSION": ARRAY_API_VERSION,
                     "FUSELOOP_DEVICE": os.environ.get("FUSELOOP_DEVICE", "cpu")})


@nox.session
def fuzz(session: nox.Session) -> None:
    """Differential fuzzing against numpy: the long profile of tests/test_fuzz.py."""
    session.install(".[test]")
    session.run("python", "-m", "pytest", "-q", "tests/test_fuzz.py", *session.posargs,
                env={"HYPOTHESIS_PROFILE": "long"})
