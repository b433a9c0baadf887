"""streamkit.distributed under `mpirun -np 2` and `-np 3` (mpi_ranks.py: each rank checks its answers
and the errors every rank must raise). Without a GPU the search's exchange runs with the CPU searcher
and the scaler's failure reaches every rank; with one, the GPU search and the scaler run too (the
ranks share the GPUs). Skipped without mpirun, mpi4py or the extension _streamkit_mpi (a source build
against an MPI; the binary wheel leaves it out)."""

import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install 'streamkit[mpi]')")
if shutil.which("mpirun") is None:
    pytest.skip("mpirun is not on the PATH", allow_module_level=True)
try:
    from streamkit import _streamkit_mpi  # noqa: F401
except ImportError:
    pytest.skip("streamkit._streamkit_mpi is not built (the binary wheel, or a source build that found no MPI)",
                allow_module_level=True)

# Open MPI as root (CI) and with more ranks than cores (4.x: OMPI_MCA_..., 5.x: PRRTE's PRTE_MCA_...).
ENVIRONMENT = dict(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
                   PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe")


@pytest.mark.parametrize("ranks", [2, 3])
def test_ranks(ranks):
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_ranks.py")
    run = subprocess.run(["mpirun", "-np", str(ranks), sys.executable, script], env={**os.environ, **ENVIRONMENT},
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"at {ranks} ranks" in run.stdout and ": 0 failures" in run.stdout, run.stdout
