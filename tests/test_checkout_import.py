"""A script beside a clone folder named ``lazyrt``: ``import lazyrt`` finds the
clone's top folder first. The checkout's root ``__init__.py`` then loads the
installed lazyrt, or, where none is installed, fails saying so, instead of an
empty namespace package ("module 'lazyrt' has no attribute 'tensor'")."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = ("import lazyrt as lr\n"
          "print(lr.__file__)\n"
          "print((lr.tensor([1.0, 2.0]) * 2).sum().item())\n")


@pytest.fixture
def beside(tmp_path):
    """A folder holding a clone named ``lazyrt`` (a link to this checkout) and a script."""
    os.symlink(ROOT, tmp_path / "lazyrt", target_is_directory=True)
    (tmp_path / "script.py").write_text(SCRIPT)
    return tmp_path


def _run(folder, *flags, env=None):
    env = {k: v for k, v in (env or os.environ).items() if k != "PYTHONPATH"}
    env.setdefault("LAZYRT_BACKEND", "numpy")
    return subprocess.run([sys.executable, *flags, "script.py"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)


def _installed() -> bool:
    """Whether this Python imports lazyrt with no help from PYTHONPATH or the folder."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", "import lazyrt.api"], cwd="/",
                          env=env, capture_output=True).returncode == 0


def test_a_script_beside_the_clone_gets_the_installed_lazyrt(beside):
    if not _installed():
        pytest.skip("lazyrt is not installed for this Python (only on PYTHONPATH)")
    done = _run(beside)
    assert done.returncode == 0, done.stderr
    where, value = done.stdout.split()
    assert os.path.dirname(where) != str(beside / "lazyrt")  # not the clone's top folder
    assert value == "6.0"


def test_without_an_installed_lazyrt_the_import_says_what_happened(beside):
    done = _run(beside, "-S")  # no site-packages: nothing installed
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ImportError: `import lazyrt` found {beside / 'lazyrt'}, a source "
                           "checkout of lazyrt beside your script, not the lazyrt package")
    assert "pip install -e" in last and "has no attribute" not in done.stderr


def test_under_another_name_the_checkout_root_does_nothing(tmp_path):
    os.symlink(ROOT, tmp_path / "myclone", target_is_directory=True)
    (tmp_path / "script.py").write_text("import sys, myclone\nprint('lazyrt' in sys.modules)\n")
    done = _run(tmp_path, "-S")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
