"""Development sessions: ``nox -s tests | tests_all_devices | lint | docs | bench``.

Every session runs in a fresh virtual environment made with the interpreter that runs nox
(no fixed Python version). Extra arguments after ``--`` go to the underlying command, e.g.
``nox -s tests -- -k cache -x`` or ``nox -s bench -- --quick``.
"""

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
def tests_all_devices(session: nox.Session) -> None:
    """Run the test suite parametrised over every OpenCL device present."""
    session.install(".[test]")
    session.run("python", "-m", "pytest", "-q", "tests", *session.posargs,
                env={"FUSELOOP_TEST_ALL_DEVICES": "1"})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check over the package, tests, examples, benchmarks and this file."""
    session.install("ruff==0.17.6")
    session.run("ruff", "check", "fuseloop", "tests", "examples", "benchmarks", "docs",
                "noxfile.py", *session.posargs)


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


@nox.session
def fuzz(session: nox.Session) -> None:
    """Differential fuzzing against numpy: the long profile of tests/test_fuzz.py."""
    session.install(".[test]")
    session.run("python", "-m", "pytest", "-q", "tests/test_fuzz.py", *session.posargs,
                env={"HYPOTHESIS_PROFILE": "long"})
