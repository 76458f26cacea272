"""``pip install ./clients/python`` into a fresh virtual environment, and an import there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(600)
def test_pip_install_into_a_fresh_venv(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(PACKAGE)], check=True, timeout=540)
    out = subprocess.run(
        [
            str(python),
            "-c",
            "import mcp_resume_client as m, pathlib; "
            "print(m.__version__, callable(m.resumable_client), "
            "(pathlib.Path(m.__file__).parent / 'py.typed').exists())",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    assert out.stdout.split() == ["0.1.0", "True", "True"], out
