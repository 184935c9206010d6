"""Planning: what a run will run, cost and need, found before it starts.

``plan`` is the cost model (``banditsweep plan`` and ``run``'s first lines: per cell the trials,
seconds per round measured in the store or probed here, memory, GPUs; the total as wall time);
``slurm`` gives the ``#SBATCH`` lines of ``plan --slurm`` and what ``run`` says inside a Slurm job
whose time limit a trial outlasts; ``confirmation`` is a spec's held-out stage (``confirm:``): the
chosen grid point of each ended cell, planned again on fresh seeds by the report's own rule;
``datasets`` makes sure the dataset files a sweep's trials read are there (downloaded once).
Imports the spec, publishing (display names) and results (the held-out stage's choice) rooms;
never the command line or the Python API. Importing this room imports none of its modules.
"""
