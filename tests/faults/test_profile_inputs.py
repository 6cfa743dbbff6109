"""`rlbench profile`'s inputs: every bad one is exit 2 with one line saying what to do, before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.fault_helpers import one_line_error, rlbench

pytestmark = pytest.mark.slow  # each test starts `rlbench profile` in a subprocess

SCRIPT = "print('ran')\n"


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--seed-arg", '--seed "{seed}'], "--seed-arg"),  # an unclosed quote was an internal error
        (["--seed", "-5"], "--seed must lie in"),
        (["--seed", str(2**31)], "--seed must lie in"),
        (["--timeout", "nan"], "--timeout must be positive"),
        (["--timeout", "inf"], "--timeout must be positive"),
    ],
)
def test_bad_option_is_a_usage_error(tmp_path: Path, options: list[str], says: str) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    proc = rlbench(["profile", *options, "--store", "s", "--", "python", "train.py"], tmp_path)
    assert says in one_line_error(proc)
    assert "ran" not in proc.stdout
    assert not (tmp_path / "s").exists() or not list((tmp_path / "s").glob("*.jsonl"))


def test_missing_module_is_a_usage_error_like_a_missing_script(tmp_path: Path) -> None:
    proc = rlbench(["profile", "--quiet", "--store", "s", "--", "python", "-m", "nosuchmod_rlbench_test"], tmp_path)
    assert "no module named 'nosuchmod_rlbench_test'" in one_line_error(proc)
    assert not (tmp_path / "s").exists() or not list((tmp_path / "s").glob("*.jsonl"))
    script = rlbench(["profile", "--store", "s", "--", "python", "nosuch.py"], tmp_path)
    assert "no such script" in one_line_error(script)


def test_package_without_main_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    proc = rlbench(["profile", "--quiet", "--store", "s", "--", "python", "-m", "mypkg"], tmp_path)
    assert "without a __main__" in one_line_error(proc)


def test_module_whose_own_import_fails_is_the_script_failing(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("import nosuch_dependency_rlbench_test\n")
    proc = rlbench(["profile", "--store", "s", "--", "python", "-m", "broken"], tmp_path)
    assert proc.returncode == 1, proc.stderr  # the measured code failed: not a usage error
    assert "ModuleNotFoundError" in proc.stderr


def test_python2_is_not_silently_rlbench_own_python(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    proc = rlbench(["profile", "--store", "s", "--", "python2", "train.py"], tmp_path)
    assert "Python 2" in one_line_error(proc) and "ran" not in proc.stdout


def test_interpreter_that_does_not_start_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    fake = tmp_path / "python3.99"
    fake.write_text("#!/bin/sh\necho 'python3.99: command not found' >&2\nexit 127\n")
    fake.chmod(0o755)
    proc = rlbench(["profile", "--store", "s", "--", str(fake), "train.py"], tmp_path)
    assert "does not run Python 3" in one_line_error(proc)
    named = rlbench(["profile", "--store", "s", "--", "python3.99", "train.py"], tmp_path)
    assert "python3.99" in one_line_error(named)
