"""A LocalCluster of two worker processes on 127.0.0.1 for the prototypes, until SIGTERM.

python cluster.py ADDRESS_FILE &   # writes the scheduler's address there; kill its pid to stop
"""

import signal
import sys
import time
from pathlib import Path

from dask.distributed import LocalCluster

if __name__ == "__main__":
    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    )
    Path(sys.argv[1]).write_text(cluster.scheduler_address)
    print("up", cluster.scheduler_address, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            time.sleep(1)
    finally:
        cluster.close()
