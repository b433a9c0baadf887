"""The Python examples (examples/python) run as their README shows them, with smaller inputs where they take
sizes: each checks its own answers and exits 0, 1 on a wrong answer, 77 without a GPU (skipped here, with
its message, as CTest skips the C++ examples); an example whose modules (CuPy) are not installed is skipped."""

import os
import shutil
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
    "dask_nearest_neighbor": ["dask_nearest_neighbor.py", "--observations", "18", "--references", "12"],
    "dask_minmax_scaler": ["dask_minmax_scaler.py", "--blocks", "6", "--columns", "5000"],
    "mpi_nearest_neighbor_1_rank": ["mpi_nearest_neighbor.py", "--observations", "16", "--references", "12"],
    "mpi_nearest_neighbor_2_ranks": ["mpirun", "-np", "2", "mpi_nearest_neighbor.py", "--observations", "16", "--references", "12"],
}
# Open MPI as root and with more ranks than cores (4.x: OMPI_MCA_..., 5.x: PRRTE's PRTE_MCA_...).
MPI_ENVIRONMENT = dict(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
                       PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe")


@pytest.mark.parametrize("name", sorted(RUNS))
def test_example_checks_its_answers(name, tmp_path):
    launcher = []
    script, *arguments = RUNS[name]
    if script == "mpirun":  # mpirun -np N script ...: the ranks run this interpreter
        if shutil.which("mpirun") is None:
            pytest.skip("mpirun is not on the PATH")
        launcher = ["mpirun", *arguments[:2]]
        script, *arguments = arguments[2:]
    done = subprocess.run([*launcher, sys.executable, str(EXAMPLES / script), *arguments], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env={**os.environ, **MPI_ENVIRONMENT})
    output = done.stdout + done.stderr
    if done.returncode == EXIT_SKIPPED:
        pytest.skip(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else f"{script} exited {EXIT_SKIPPED}")
    if done.returncode != 0 and "ModuleNotFoundError: No module named 'cupy" in output:
        pytest.skip(f"{script} needs CuPy, which is not installed")
    assert done.returncode == 0, f"{script} {' '.join(arguments)} exited {done.returncode}:\n{output[-4000:]}"
