"""The Python examples (examples/python) run as their README shows them, with smaller inputs where they take
sizes: each checks its own answers and exits 0, 1 on a wrong answer, 77 without a GPU (skipped here, with
its message, as CTest skips the C++ examples); an example whose modules (CuPy) are not installed is skipped."""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "python"
EXIT_SKIPPED = 77

RUNS = {
    "normalize_many_arrays": ["normalize_many_arrays.py"],
    "reverse_geocode": ["reverse_geocode.py", "--random", "20000", "--k", "3"],
    "dynamic_nearest_neighbor": ["dynamic_nearest_neighbor.py"],
    "dynamic_nearest_neighbor_host": ["dynamic_nearest_neighbor.py", "--host"],
    "sklearn_nearest_neighbors": ["sklearn_nearest_neighbors.py", "--random", "50000", "--sample", "300"],
    "places_within_radius": ["places_within_radius.py", "--random", "50000"],
    "places_within_radius_50km": ["places_within_radius.py", "--random", "20000", "--radius", "50"],
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_example_checks_its_answers(name, tmp_path):
    script, *arguments = RUNS[name]
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *arguments], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    output = done.stdout + done.stderr
    if done.returncode == EXIT_SKIPPED:
        pytest.skip(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else f"{script} exited {EXIT_SKIPPED}")
    if done.returncode != 0 and "ModuleNotFoundError: No module named 'cupy" in output:
        pytest.skip(f"{script} needs CuPy, which is not installed")
    assert done.returncode == 0, f"{script} {' '.join(arguments)} exited {done.returncode}:\n{output[-4000:]}"
